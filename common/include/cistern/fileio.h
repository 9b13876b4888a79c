/* File reads that must not fail later, elsewhere. */
#ifndef CISTERN_FILEIO_H
#define CISTERN_FILEIO_H

#include <stdint.h>

/* 0 when bytes [off, end) of fd read without an error, else the error
 * (negative errno; -EIO for a file that ends before end). Pages in the
 * page cache cannot fail (mincore says which those are): only the others
 * are read, into the page cache and no buffer (sendfile to /dev/null), and
 * a later read (sendfile, a reply, the kernel's passthrough) finds them
 * cached. For a block file about to be handed to someone who could only
 * report a failing disk as a broken connection or an EIO to the
 * application. */
int cis_file_range_readable(int fd, uint64_t off, uint64_t end);

#endif
