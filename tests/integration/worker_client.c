/* worker_client: drive a cistern-worker from integration tests.
 *
 *   worker_client [--tcp HOST:PORT] [--unix PATH] FILE-SPEC CMD ARGS...
 *
 * FILE-SPEC names the file whose blocks are read, either through the
 * master (--master HOST:PORT --path /cistern/path: Lookup each component,
 * then Open) or directly (--uri file:///dir --key KEY --mount-id N
 * [--block-size N]: the client stats the object itself for its version).
 * --force-block-size N and --file-size N then claim another block size or
 * file size in the references sent (the id is computed from the claims).
 *
 * Commands:
 *   read INDEX OFF LEN   remote read (TCP, else the Unix socket); bytes to stdout
 *   cat [AHEAD]          every block in order over TCP; the file's bytes to stdout.
 *                        AHEAD > 0: before each block, Prefetch the blocks up to
 *                        AHEAD ahead not asked for yet, as cistern-fuse's
 *                        readahead asks for the blocks ahead of a sequential reader
 *   local INDEX          OpenLocal on the Unix socket; the fd's bytes to stdout
 *   hold INDEX MS        OpenLocal, keep the lease MS ms, print "held", release
 *   waitlocal INDEX      OpenLocal with wait: the fd at the first call, even for
 *                        a cold block; the fd's bytes to stdout
 *   leases INDEX         three leases on the block, renewed and released in
 *                        batches with an unknown id among them; prints "leases ok"
 *   parallel N INDEX     N threads read the whole block at once over TCP; all
 *                        must agree; prints the bytes once
 *   prefetch|load|pin|unpin|free INDEX...   the batch requests; prints the reply
 *   replicate INDEX HOST:PORT [pin]  copy the block from that peer worker (store
 *                        fallback), pinned once cached with pin
 *   stat                 prints "dir used capacity blocks writable" lines
 *   id INDEX             prints the block id
 *   garbage              sends junk after HELLO and checks the worker still answers
 * Exit status 0 on success; failures print one line to stderr. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cistern/config.h"
#include "cistern/error.h"
#include "cistern/frame.h"
#include "cistern/hash.h"
#include "cistern/msgtype.h"
#include "cistern/rpc.h"
#include "cistern/ufs.h"
#include "cistern/proto/master.pb-c.h"
#include "cistern/proto/worker.pb-c.h"

typedef struct file_spec {
	uint64_t mount_id;
	char key[4096];
	char version[CIS_UFS_VERSION_MAX];
	uint64_t size, block_size;
} file_spec;

static const char *tcp_addr, *unix_path, *master_addr, *path, *uri, *key;
static uint64_t mount_id = 1, block_size = 1 << 20;
/* Forged references, to test that the worker refuses or survives them. */
static uint64_t force_block_size, force_file_size;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "worker_client: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static cis_rpc_client *connect_to(const char *addr, const char *upath)
{
	cis_rpc_client_opts o = {0};
	cis_rpc_client *c;
	static char host[256];
	uint16_t port;

	if (addr) {
		if (cis_parse_hostport(addr, host, sizeof(host), &port) < 0)
			die("bad address %s", addr);
		o.host = host;
		o.port = port;
	} else {
		o.unix_path = upath;
	}
	o.name = "worker_client";
	o.call_timeout_ms = 60000;
	if (cis_rpc_client_new(&o, &c) < 0)
		die("cannot make a client");
	return c;
}

static void *call(cis_rpc_client *c, uint16_t type, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *desc, int *fd)
{
	cis_rpc_result res;
	cis_errmsg em = {{0}};
	ProtobufCMessage *out = NULL;
	int rc;

	memset(&res, 0, sizeof(res));
	rc = cis_rpc_call(c, type, req, NULL, 0, &res, 0, &em);
	if (rc < 0)
		die("rpc %u: %s (%s)", type, cis_errmsg_or(&em, rc), cis_strerror(rc));
	if (cis_msg_unpack(desc, res.msg, res.msg_len, &out) < 0)
		die("rpc %u: malformed reply", type);
	if (fd)
		*fd = res.fd;
	else if (res.fd >= 0)
		close(res.fd);
	res.fd = -1;
	cis_rpc_result_free(&res);
	return out;
}

static void spec_from_master(file_spec *f)
{
	cis_rpc_client *c = connect_to(master_addr, NULL);
	uint64_t ino = 1;
	char *p = strdup(path), *save = NULL;

	for (char *name = strtok_r(p, "/", &save); name; name = strtok_r(NULL, "/", &save)) {
		Cis__LookupRequest req = CIS__LOOKUP_REQUEST__INIT;
		Cis__LookupReply *rep;

		req.parent = ino;
		req.name = name;
		rep =
		    call(c, CIS_MSG_MASTER_LOOKUP, &req.base, &cis__lookup_reply__descriptor, NULL);
		ino = rep->inode->id;
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	}
	free(p);
	Cis__OpenRequest oreq = CIS__OPEN_REQUEST__INIT;
	Cis__OpenReply *orep;

	oreq.inode = ino;
	orep = call(c, CIS_MSG_MASTER_OPEN, &oreq.base, &cis__open_reply__descriptor, NULL);
	f->mount_id = orep->mount->id;
	snprintf(f->key, sizeof(f->key), "%s", orep->inode->key);
	snprintf(f->version, sizeof(f->version), "%s", orep->inode->version);
	f->size = orep->inode->size;
	f->block_size = orep->mount->block_size;
	protobuf_c_message_free_unpacked(&orep->base, NULL);
	cis_rpc_client_free(c);
}

static void spec_from_uri(file_spec *f)
{
	cis_ufs *u;
	struct cis_ufs_stat st;
	cis_errmsg em = {{0}};
	int rc;

	rc = cis_ufs_open(uri, NULL, &u, &em);
	if (rc == 0)
		rc = cis_ufs_stat(u, key, &st, &em);
	if (rc < 0)
		die("%s", cis_errmsg_or(&em, rc));
	cis_ufs_close(u);
	f->mount_id = mount_id;
	snprintf(f->key, sizeof(f->key), "%s", key);
	snprintf(f->version, sizeof(f->version), "%s", st.version);
	f->size = st.size;
	f->block_size = block_size;
}

typedef struct ref_buf {
	Cis__BlockRef ref;
	uint8_t id[16];
} ref_buf;

static void make_ref(const file_spec *f, uint64_t index, ref_buf *r)
{
	cis_block_id id = cis_block_id_make(f->mount_id, f->key, f->version, f->block_size, index);

	cis__block_ref__init(&r->ref);
	cis_block_id_to_bytes(id, r->id);
	r->ref.id.data = r->id;
	r->ref.id.len = 16;
	r->ref.mount_id = f->mount_id;
	r->ref.key = (char *)f->key;
	r->ref.version = (char *)f->version;
	r->ref.index = index;
	r->ref.block_size = f->block_size;
	r->ref.file_size = f->size;
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);

		if (k <= 0)
			die("write: %s", strerror(errno));
		p += k;
		n -= (size_t)k;
	}
}

typedef struct read_ctx {
	int out_fd; /* >= 0: the bytes go straight there (cat), else into buf */
	char *buf;
	size_t n, cap;
	uint64_t next_off;
	uint64_t total;
	int frames;
	int err;
} read_ctx;

static int on_frame(void *arg, const cis_frame_hdr *hdr, const uint8_t *msg, const uint8_t *data)
{
	read_ctx *c = arg;
	Cis__ReadBlockReply *r = NULL;

	if (hdr->flags & CIS_FRAME_ERROR) {
		c->err = -CIS_E_STORE;
		return 0;
	}
	if (cis_msg_unpack(&cis__read_block_reply__descriptor, msg, hdr->msg_len,
	                   (ProtobufCMessage **)&r) < 0)
		return -CIS_E_PROTO;
	if (c->frames++ == 0) {
		c->next_off = r->offset;
		c->total = r->total;
	}
	if (r->offset != c->next_off) {
		fprintf(stderr, "worker_client: gap: frame at %" PRIu64 ", expected %" PRIu64 "\n",
		        r->offset, c->next_off);
		protobuf_c_message_free_unpacked(&r->base, NULL);
		return -CIS_E_PROTO;
	}
	protobuf_c_message_free_unpacked(&r->base, NULL);
	if (c->out_fd >= 0) {
		write_all(c->out_fd, (const char *)data, hdr->data_len);
	} else if (hdr->data_len) {
		if (c->n + hdr->data_len > c->cap) {
			c->cap = (c->n + hdr->data_len) * 2;
			c->buf = realloc(c->buf, c->cap);
			if (!c->buf)
				return -ENOMEM;
		}
		memcpy(c->buf + c->n, data, hdr->data_len);
	}
	c->n += hdr->data_len;
	c->next_off += hdr->data_len;
	return 0;
}

static int read_range(cis_rpc_client *c, const file_spec *f, uint64_t index, uint64_t off,
                      uint64_t len, int out_fd, read_ctx *rc_out, cis_errmsg *em)
{
	Cis__ReadBlockRequest req = CIS__READ_BLOCK_REQUEST__INIT;
	ref_buf r;

	make_ref(f, index, &r);
	req.block = &r.ref;
	req.offset = off;
	req.length = len;
	memset(rc_out, 0, sizeof(*rc_out));
	rc_out->out_fd = out_fd;
	return cis_rpc_call_stream(c, CIS_MSG_WORKER_READ_BLOCK, &req.base, on_frame, rc_out, 0,
	                           em);
}

static void cmd_read(cis_rpc_client *c, const file_spec *f, uint64_t index, uint64_t off,
                     uint64_t len)
{
	read_ctx rc;
	cis_errmsg em = {{0}};
	int err = read_range(c, f, index, off, len, 1, &rc, &em);

	if (err < 0)
		die("read block %" PRIu64 " [%" PRIu64 "+%" PRIu64 "]: %s", index, off, len,
		    cis_errmsg_or(&em, err));
	if (rc.n != rc.total)
		die("read block %" PRIu64 ": got %zu bytes, reply said %" PRIu64, index, rc.n,
		    rc.total);
}

static void prefetch_one(cis_rpc_client *c, const file_spec *f, uint64_t index)
{
	Cis__PrefetchRequest req = CIS__PREFETCH_REQUEST__INIT;
	Cis__PrefetchReply *rep;
	Cis__BlockRef *rp;
	ref_buf r;

	make_ref(f, index, &r);
	rp = &r.ref;
	req.n_blocks = 1;
	req.blocks = &rp;
	rep = call(c, CIS_MSG_WORKER_PREFETCH, &req.base, &cis__prefetch_reply__descriptor, NULL);
	protobuf_c_message_free_unpacked(&rep->base, NULL);
}

static void cmd_cat(cis_rpc_client *c, const file_spec *f, uint64_t ahead)
{
	uint64_t nb = f->size ? (f->size + f->block_size - 1) / f->block_size : 0;
	uint64_t asked = 1; /* blocks below this were prefetched or are block 0 */

	for (uint64_t b = 0; b < nb; b++) {
		for (; ahead && asked < nb && asked <= b + ahead; asked++)
			prefetch_one(c, f, asked);
		cmd_read(c, f, b, 0, 0);
	}
}

static void cmd_local(const file_spec *f, uint64_t index, long hold_ms)
{
	cis_rpc_client *c = connect_to(NULL, unix_path);
	Cis__OpenLocalRequest req = CIS__OPEN_LOCAL_REQUEST__INIT;
	Cis__OpenLocalReply *rep;
	Cis__LeaseRequest lr = CIS__LEASE_REQUEST__INIT;
	Cis__LeaseReply *lrep;
	ref_buf r;
	int fd = -1;
	char buf[1 << 16];
	uint64_t got = 0;

	make_ref(f, index, &r);
	req.block = &r.ref;
	for (int attempt = 0;; attempt++) {
		cis_rpc_result res;
		cis_errmsg em = {{0}};
		read_ctx rd;
		int rc;

		memset(&res, 0, sizeof(res));
		rc = cis_rpc_call(c, CIS_MSG_WORKER_OPEN_LOCAL, &req.base, NULL, 0, &res, 0, &em);
		if (rc == -EAGAIN && attempt > 0 && attempt < 100) {
			/* The read below had every byte before the worker
			 * committed the block (it does so just after): a
			 * moment later it opens. */
			usleep(20000);
			continue;
		}
		if (rc != -EAGAIN || attempt > 0) {
			if (rc < 0)
				die("open local: %s (%s)", cis_errmsg_or(&em, rc),
				    cis_strerror(rc));
			if (cis_msg_unpack(&cis__open_local_reply__descriptor, res.msg, res.msg_len,
			                   (ProtobufCMessage **)&rep) < 0)
				die("open local: malformed reply");
			fd = res.fd;
			res.fd = -1;
			cis_rpc_result_free(&res);
			break;
		}
		/* Not cached yet: the worker started its fetch. Read the block
		 * over the socket as a client would (joining that fetch), then
		 * it opens locally. */
		fprintf(stderr, "worker_client: open local: %s\n", em.text);
		rc = read_range(c, f, index, 0, 0, -1, &rd, &em);
		free(rd.buf);
		if (rc < 0 || rd.err)
			die("read after open local said not cached: %s", cis_errmsg_or(&em, rc));
	}
	if (fd < 0)
		die("open local: no fd passed");
	if (fcntl(fd, F_GETFL) & (O_WRONLY | O_RDWR))
		die("open local: fd is writable");
	if (hold_ms >= 0) {
		printf("held %" PRIu64 "\n", rep->length);
		fflush(stdout);
		usleep((useconds_t)hold_ms * 1000);
		lr.lease_id = rep->lease_id;
		lr.lease_ms = 5000;
		lrep = call(c, CIS_MSG_WORKER_RENEW_LOCAL, &lr.base, &cis__lease_reply__descriptor,
		            NULL);
		if (lrep->lease_expiry_ms != 5000)
			die("renew: granted %" PRIu64 " ms", lrep->lease_expiry_ms);
		protobuf_c_message_free_unpacked(&lrep->base, NULL);
	} else {
		for (;;) {
			ssize_t n = pread(fd, buf, sizeof(buf), (off_t)got);

			if (n < 0)
				die("read fd: %s", strerror(errno));
			if (n == 0)
				break;
			write_all(1, buf, (size_t)n);
			got += (uint64_t)n;
		}
		if (got != rep->length)
			die("open local: fd has %" PRIu64 " bytes, reply said %" PRIu64, got,
			    rep->length);
	}
	close(fd);
	lr.lease_id = rep->lease_id;
	lrep = call(c, CIS_MSG_WORKER_RELEASE_LOCAL, &lr.base, &cis__lease_reply__descriptor, NULL);
	protobuf_c_message_free_unpacked(&lrep->base, NULL);
	{
		/* A released lease is gone: a second release is an error. */
		cis_rpc_result res;
		cis_errmsg em = {{0}};
		int rc;

		memset(&res, 0, sizeof(res));
		rc = cis_rpc_call(c, CIS_MSG_WORKER_RELEASE_LOCAL, &lr.base, NULL, 0, &res, 0, &em);
		if (rc != -ENOENT)
			die("second release of lease: %d, want -ENOENT", rc);
		cis_rpc_result_free(&res);
	}
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	cis_rpc_client_free(c);
}

/* OpenLocal with wait: one call, never "not cached yet". */
static int open_wait(cis_rpc_client *c, const file_spec *f, uint64_t index,
                     Cis__OpenLocalReply **rep)
{
	Cis__OpenLocalRequest req = CIS__OPEN_LOCAL_REQUEST__INIT;
	ref_buf r;
	int fd = -1;

	make_ref(f, index, &r);
	req.block = &r.ref;
	req.wait = true;
	*rep =
	    call(c, CIS_MSG_WORKER_OPEN_LOCAL, &req.base, &cis__open_local_reply__descriptor, &fd);
	if (fd < 0)
		die("open local with wait: no fd passed");
	return fd;
}

static void cmd_waitlocal(const file_spec *f, uint64_t index)
{
	cis_rpc_client *c = connect_to(NULL, unix_path);
	Cis__OpenLocalReply *rep;
	int fd = open_wait(c, f, index, &rep);
	char buf[1 << 16];
	uint64_t got = 0;
	ssize_t n;

	while ((n = pread(fd, buf, sizeof(buf), (off_t)got)) > 0) {
		write_all(1, buf, (size_t)n);
		got += (uint64_t)n;
	}
	if (n < 0 || got != rep->length)
		die("waitlocal: fd gave %" PRIu64 " bytes, reply said %" PRIu64, got, rep->length);
	fprintf(stderr, "waited=%d\n", rep->waited);
	close(fd);
	Cis__LeaseRequest lr = CIS__LEASE_REQUEST__INIT;
	lr.lease_id = rep->lease_id;
	protobuf_c_message_free_unpacked(
	    call(c, CIS_MSG_WORKER_RELEASE_LOCAL, &lr.base, &cis__lease_reply__descriptor, NULL),
	    NULL);
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	cis_rpc_client_free(c);
}

/* A lease call that must fail with want. */
static void lease_fails(cis_rpc_client *c, uint16_t type, Cis__LeaseRequest *lr, int want)
{
	cis_rpc_result res;
	cis_errmsg em = {{0}};

	memset(&res, 0, sizeof(res));
	int rc = cis_rpc_call(c, type, &lr->base, NULL, 0, &res, 0, &em);
	if (rc != want)
		die("lease call %u: %d, want %d", type, rc, want);
	cis_rpc_result_free(&res);
}

static void cmd_leases(const file_spec *f, uint64_t index)
{
	cis_rpc_client *c = connect_to(NULL, unix_path);
	uint64_t ids[4];
	for (int i = 0; i < 3; i++) {
		Cis__OpenLocalReply *rep;
		close(open_wait(c, f, index, &rep));
		ids[i] = rep->lease_id;
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	}
	ids[3] = ids[0] ^ 0x5a5a5a5a5a5aull; /* nobody's lease */
	Cis__LeaseRequest lr = CIS__LEASE_REQUEST__INIT;
	lr.lease_id = ids[0];
	lr.more_lease_ids = ids + 1;
	lr.n_more_lease_ids = 3;
	lr.lease_ms = 7000;
	Cis__LeaseReply *rep =
	    call(c, CIS_MSG_WORKER_RENEW_LOCAL, &lr.base, &cis__lease_reply__descriptor, NULL);
	if (rep->lease_expiry_ms != 7000 || rep->n_unknown_lease_ids != 1 ||
	    rep->unknown_lease_ids[0] != ids[3])
		die("batch renew: expiry %" PRIu64 ", %zu unknown", rep->lease_expiry_ms,
		    rep->n_unknown_lease_ids);
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	/* More than a batch holds is refused whole. */
	uint64_t *many = calloc(5000, sizeof(*many));
	if (!many)
		die("out of memory");
	lr.more_lease_ids = many;
	lr.n_more_lease_ids = 5000;
	lease_fails(c, CIS_MSG_WORKER_RELEASE_LOCAL, &lr, -EINVAL);
	free(many);
	lr.more_lease_ids = ids + 1;
	lr.n_more_lease_ids = 3;
	rep = call(c, CIS_MSG_WORKER_RELEASE_LOCAL, &lr.base, &cis__lease_reply__descriptor, NULL);
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	/* All three are gone: each alone is unknown now. */
	lr.n_more_lease_ids = 0;
	for (int i = 0; i < 3; i++) {
		lr.lease_id = ids[i];
		lease_fails(c, CIS_MSG_WORKER_RENEW_LOCAL, &lr, -ENOENT);
	}
	printf("leases ok\n");
	cis_rpc_client_free(c);
}

typedef struct par_arg {
	cis_rpc_client *c;
	const file_spec *f;
	uint64_t index;
	read_ctx rc;
	int err;
} par_arg;

static void *par_thread(void *arg)
{
	par_arg *p = arg;
	cis_errmsg em = {{0}};

	p->err = read_range(p->c, p->f, p->index, 0, 0, -1, &p->rc, &em);
	if (p->err < 0)
		fprintf(stderr, "worker_client: parallel read: %s\n", cis_errmsg_or(&em, p->err));
	return NULL;
}

static void cmd_parallel(const file_spec *f, int n, uint64_t index)
{
	pthread_t t[256];
	par_arg a[256];

	if (n < 1 || n > 256)
		die("parallel: 1..256 readers");
	for (int i = 0; i < n; i++) {
		/* One connection each: the readers are independent clients. */
		a[i].c = connect_to(tcp_addr, unix_path);
		a[i].f = f;
		a[i].index = index;
		pthread_create(&t[i], NULL, par_thread, &a[i]);
	}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < n; i++) {
		if (a[i].err < 0)
			die("parallel reader %d failed", i);
		if (a[i].rc.n != a[0].rc.n || memcmp(a[i].rc.buf, a[0].rc.buf, a[0].rc.n) != 0)
			die("parallel reader %d got different bytes", i);
	}
	write_all(1, a[0].rc.buf, a[0].rc.n);
	for (int i = 0; i < n; i++) {
		free(a[i].rc.buf);
		cis_rpc_client_free(a[i].c);
	}
}

static void cmd_batch(cis_rpc_client *c, const file_spec *f, const char *cmd, int argc, char **argv)
{
	ref_buf *refs = calloc((size_t)argc + 1, sizeof(*refs));
	Cis__BlockRef **rp = calloc((size_t)argc + 1, sizeof(*rp));
	ProtobufCBinaryData *ids = calloc((size_t)argc + 1, sizeof(*ids));

	for (int i = 0; i < argc; i++) {
		make_ref(f, strtoull(argv[i], NULL, 10), &refs[i]);
		rp[i] = &refs[i].ref;
		ids[i] = refs[i].ref.id;
	}
	if (strcmp(cmd, "prefetch") == 0) {
		Cis__PrefetchRequest req = CIS__PREFETCH_REQUEST__INIT;
		Cis__PrefetchReply *rep;

		req.n_blocks = (size_t)argc;
		req.blocks = rp;
		rep = call(c, CIS_MSG_WORKER_PREFETCH, &req.base, &cis__prefetch_reply__descriptor,
		           NULL);
		printf("queued %u\n", rep->queued);
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	} else if (strcmp(cmd, "load") == 0) {
		Cis__LoadRequest req = CIS__LOAD_REQUEST__INIT;
		Cis__LoadReply *rep;
		int bad = 0;

		req.n_blocks = (size_t)argc;
		req.blocks = rp;
		rep = call(c, CIS_MSG_WORKER_LOAD, &req.base, &cis__load_reply__descriptor, NULL);
		for (size_t i = 0; i < rep->n_results; i++) {
			printf("%zu code=%d cached=%d len=%" PRIu64 " %s\n", i,
			       rep->results[i]->code, rep->results[i]->was_cached,
			       rep->results[i]->length, rep->results[i]->message);
			bad |= rep->results[i]->code < 0;
		}
		protobuf_c_message_free_unpacked(&rep->base, NULL);
		if (bad)
			exit(2);
	} else if (strcmp(cmd, "pin") == 0 || strcmp(cmd, "unpin") == 0) {
		Cis__PinRequest req = CIS__PIN_REQUEST__INIT;
		Cis__PinReply *rep;

		req.n_ids = (size_t)argc;
		req.ids = ids;
		req.pin = strcmp(cmd, "pin") == 0;
		rep = call(c, CIS_MSG_WORKER_PIN, &req.base, &cis__pin_reply__descriptor, NULL);
		printf("changed %u absent %u\n", rep->changed, rep->absent);
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	} else {
		Cis__FreeRequest req = CIS__FREE_REQUEST__INIT;
		Cis__FreeReply *rep;

		req.n_ids = (size_t)argc;
		req.ids = ids;
		rep = call(c, CIS_MSG_WORKER_FREE, &req.base, &cis__free_reply__descriptor, NULL);
		printf("freed %u deferred %u absent %u\n", rep->freed, rep->deferred, rep->absent);
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	}
	free(refs);
	free(rp);
	free(ids);
}

static void cmd_stat(cis_rpc_client *c)
{
	Cis__StatRequest req = CIS__STAT_REQUEST__INIT;
	Cis__StatReply *rep =
	    call(c, CIS_MSG_WORKER_STAT, &req.base, &cis__stat_reply__descriptor, NULL);

	for (size_t i = 0; i < rep->n_dirs; i++)
		printf("%s %" PRIu64 " %" PRIu64 " %" PRIu64 " %d %" PRIu64 "\n",
		       rep->dirs[i]->path, rep->dirs[i]->used, rep->dirs[i]->capacity,
		       rep->dirs[i]->blocks, rep->dirs[i]->writable, rep->dirs[i]->high_watermark);
	printf("worker %" PRIu64 " blocks %" PRIu64 " leases %" PRIu64 "\n", rep->worker_id,
	       rep->blocks, rep->leases);
	protobuf_c_message_free_unpacked(&rep->base, NULL);
}

int main(int argc, char **argv)
{
	file_spec f;
	cis_rpc_client *c = NULL;
	int i = 1;
	const char *cmd;

	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			die("%s needs a value", o);
		if (!strcmp(o, "--tcp"))
			tcp_addr = v;
		else if (!strcmp(o, "--unix"))
			unix_path = v;
		else if (!strcmp(o, "--master"))
			master_addr = v;
		else if (!strcmp(o, "--path"))
			path = v;
		else if (!strcmp(o, "--uri"))
			uri = v;
		else if (!strcmp(o, "--key"))
			key = v;
		else if (!strcmp(o, "--mount-id"))
			mount_id = strtoull(v, NULL, 10);
		else if (!strcmp(o, "--block-size"))
			cis_parse_size(v, &block_size);
		else if (!strcmp(o, "--force-block-size"))
			cis_parse_size(v, &force_block_size);
		else if (!strcmp(o, "--file-size"))
			force_file_size = strtoull(v, NULL, 10);
		else
			die("unknown option %s", o);
	}
	if (i >= argc)
		die("usage: worker_client [--tcp H:P] [--unix PATH] FILE-SPEC CMD ARGS");
	cmd = argv[i++];
	if (!tcp_addr && !unix_path)
		die("--tcp or --unix is needed");
	if (strcmp(cmd, "stat") == 0 || strcmp(cmd, "garbage") == 0) {
		c = connect_to(tcp_addr, unix_path);
		cmd_stat(c);
		cis_rpc_client_free(c);
		return 0;
	}
	if (master_addr && path)
		spec_from_master(&f);
	else if (uri && key)
		spec_from_uri(&f);
	else
		die("name the file: --master H:P --path P, or --uri U --key K");
	if (force_block_size)
		f.block_size = force_block_size;
	if (force_file_size)
		f.size = force_file_size;

	if (strcmp(cmd, "local") == 0 || strcmp(cmd, "hold") == 0) {
		if (i >= argc)
			die("%s INDEX", cmd);
		cmd_local(&f, strtoull(argv[i], NULL, 10),
		          strcmp(cmd, "hold") == 0 && i + 1 < argc ? atol(argv[i + 1]) : -1);
		return 0;
	}
	if (strcmp(cmd, "waitlocal") == 0 || strcmp(cmd, "leases") == 0) {
		if (i >= argc)
			die("%s INDEX", cmd);
		if (strcmp(cmd, "waitlocal") == 0)
			cmd_waitlocal(&f, strtoull(argv[i], NULL, 10));
		else
			cmd_leases(&f, strtoull(argv[i], NULL, 10));
		return 0;
	}
	if (strcmp(cmd, "parallel") == 0) {
		if (i + 1 >= argc)
			die("parallel N INDEX");
		cmd_parallel(&f, atoi(argv[i]), strtoull(argv[i + 1], NULL, 10));
		return 0;
	}
	if (strcmp(cmd, "replicate") == 0) {
		Cis__ReplicateRequest req = CIS__REPLICATE_REQUEST__INIT;
		Cis__ReplicateReply *rep;
		Cis__WorkerInfo src = CIS__WORKER_INFO__INIT;
		static char host[256];
		uint16_t port;
		ref_buf r;

		if (i + 1 >= argc || cis_parse_hostport(argv[i + 1], host, sizeof(host), &port) < 0)
			die("replicate INDEX HOST:PORT");
		make_ref(&f, strtoull(argv[i], NULL, 10), &r);
		src.host = host;
		src.rpc_port = port;
		req.block = &r.ref;
		req.source = &src;
		req.pin = i + 2 < argc && strcmp(argv[i + 2], "pin") == 0;
		c = connect_to(tcp_addr, unix_path);
		rep = call(c, CIS_MSG_WORKER_REPLICATE, &req.base,
		           &cis__replicate_reply__descriptor, NULL);
		printf("from_peer=%d code=%d\n", rep->from_peer,
		       rep->result ? rep->result->code : 0);
		protobuf_c_message_free_unpacked(&rep->base, NULL);
		cis_rpc_client_free(c);
		return 0;
	}
	if (strcmp(cmd, "id") == 0) {
		char hex[CIS_BLOCK_ID_HEX];

		if (i >= argc)
			die("id INDEX");
		cis_block_id_fmt(cis_block_id_make(f.mount_id, f.key, f.version, f.block_size,
		                                   strtoull(argv[i], NULL, 10)),
		                 hex);
		printf("%s\n", hex);
		return 0;
	}
	c = connect_to(tcp_addr, unix_path);
	if (strcmp(cmd, "read") == 0) {
		if (i + 2 >= argc)
			die("read INDEX OFF LEN");
		cmd_read(c, &f, strtoull(argv[i], NULL, 10), strtoull(argv[i + 1], NULL, 10),
		         strtoull(argv[i + 2], NULL, 10));
	} else if (strcmp(cmd, "cat") == 0) {
		cmd_cat(c, &f, i < argc ? strtoull(argv[i], NULL, 10) : 0);
	} else if (!strcmp(cmd, "prefetch") || !strcmp(cmd, "load") || !strcmp(cmd, "pin") ||
	           !strcmp(cmd, "unpin") || !strcmp(cmd, "free")) {
		cmd_batch(c, &f, cmd, argc - i, argv + i);
	} else {
		die("unknown command %s", cmd);
	}
	cis_rpc_client_free(c);
	return 0;
}
