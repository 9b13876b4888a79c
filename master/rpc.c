/* The master's binary RPC handlers (master.proto). mst_rpc_dispatch does all
 * the work without a socket, so tests and the fuzzer call it directly; the
 * RPC server's handler (mst_rpc_handler, rpcpool.c) forwards, answering
 * on the I/O thread what needs no store (mst_rpc_dispatch_quick) and the
 * rest from its own threads. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/frame.h"
#include "cistern/log.h"
#include "cistern/msgtype.h"
#include "cistern/proto/master.pb-c.h"
#include "master.h"

void mst_reply_clear(mst_reply *r)
{
	if (r->msg)
		protobuf_c_message_free_unpacked(r->msg, NULL);
	r->msg = NULL;
	r->code = 0;
	r->em.text[0] = 0;
}

static Cis__Inode *inode_msg(const mst_inode *i)
{
	Cis__Inode *p = malloc(sizeof(*p));
	if (!p)
		return NULL;
	cis__inode__init(p);
	p->id = i->id;
	p->parent = i->parent;
	p->type = i->type == MST_DIR    ? CIS__INODE_TYPE__INODE_DIR
	          : i->type == MST_LINK ? CIS__INODE_TYPE__INODE_LINK
	                                : CIS__INODE_TYPE__INODE_FILE;
	p->size = i->size;
	p->mtime_ns = i->mtime_ns;
	p->mode = i->mode;
	p->mount_id = i->mount_id;
	p->nlink = i->type == MST_DIR ? 2 : 1;
	p->mount_point = i->mount_point;
	p->name = strdup(i->name);
	p->version = strdup(i->version);
	p->key = strdup(i->type == MST_LINK ? "" : i->key);
	p->link_target = strdup(i->type == MST_LINK ? i->link_target : "");
	if (!p->name || !p->version || !p->key || !p->link_target) {
		protobuf_c_message_free_unpacked(&p->base, NULL);
		return NULL;
	}
	return p;
}

#define ALLOC_REPLY(T, init, var)                                                                  \
	T *var = malloc(sizeof(*var));                                                             \
	if (!var)                                                                                  \
		return -ENOMEM;                                                                    \
	init(var)

static int h_lookup(mst_master *m, const ProtobufCMessage *msg, mst_reply *out)
{
	const Cis__LookupRequest *q = (const Cis__LookupRequest *)msg;
	mst_inode ino;
	int err = mst_ns_lookup(m, q->parent, q->name, &ino, &out->em);
	if (err)
		return err;
	ALLOC_REPLY(Cis__LookupReply, cis__lookup_reply__init, r);
	out->msg = &r->base;
	r->inode = inode_msg(&ino);
	return r->inode ? 0 : -ENOMEM;
}

static int h_getattr(mst_master *m, const ProtobufCMessage *msg, mst_reply *out)
{
	const Cis__GetAttrRequest *q = (const Cis__GetAttrRequest *)msg;
	mst_inode ino;
	int err = mst_ns_getattr(m, q->inode, &ino, &out->em);
	if (err)
		return err;
	ALLOC_REPLY(Cis__GetAttrReply, cis__get_attr_reply__init, r);
	out->msg = &r->base;
	r->inode = inode_msg(&ino);
	return r->inode ? 0 : -ENOMEM;
}

static int h_readdir(mst_master *m, const ProtobufCMessage *msg, mst_reply *out)
{
	const Cis__ReadDirRequest *q = (const Cis__ReadDirRequest *)msg;
	mst_inode *ents;
	size_t n;
	uint64_t next;
	bool eof;
	int err = mst_ns_readdir(m, q->inode, q->cookie, q->max, &ents, &n, &next, &eof, &out->em);
	if (err)
		return err;
	Cis__ReadDirReply *r = malloc(sizeof(*r));
	if (!r) {
		free(ents);
		return -ENOMEM;
	}
	cis__read_dir_reply__init(r);
	out->msg = &r->base;
	r->next_cookie = next;
	r->eof = eof;
	r->entries = calloc(n ? n : 1, sizeof(*r->entries));
	err = r->entries ? 0 : -ENOMEM;
	for (size_t i = 0; !err && i < n; i++) {
		r->entries[i] = inode_msg(&ents[i]);
		if (!r->entries[i])
			err = -ENOMEM;
		else
			r->n_entries++;
	}
	free(ents);
	return err;
}

static int h_open(mst_master *m, const ProtobufCMessage *msg, mst_reply *out)
{
	const Cis__OpenRequest *q = (const Cis__OpenRequest *)msg;
	mst_inode ino;
	int err = 0;
	if (q->stale_version && q->stale_version[0]) {
		err = mst_ns_refresh_file(m, q->inode, q->stale_version, &out->em);
		if (err && err != -ENOENT && !mst_ns_store_wait_refused()) {
			/* The store did not answer: open what we have (its read
			 * fails again, and the open after it asks again). */
			cis_log_limited(CIS_LOG_WARN, "master:refresh", 10,
			                "asking the store for a changed file failed",
			                "inode=%llu err=\"%s\"", (unsigned long long)q->inode,
			                cis_errmsg_or(&out->em, err));
			out->em.text[0] = 0;
			err = 0;
		}
	}
	if (!err)
		err = mst_ns_getattr(m, q->inode, &ino, &out->em);
	if (err)
		return err;
	if (ino.type == MST_DIR)
		return cis_fail(&out->em, -EISDIR, "inode %llu: is a directory",
		                (unsigned long long)q->inode);
	if (ino.type == MST_LINK)
		return cis_fail(&out->em, -ELOOP, "inode %llu: is a symbolic link",
		                (unsigned long long)q->inode);
	ProtobufCMessage *mi;
	err = mst_mount_info(m, ino.mount_id, &mi);
	if (err)
		return cis_fail(&out->em, err, "inode %llu: its mount is gone",
		                (unsigned long long)q->inode);
	Cis__OpenReply *r = malloc(sizeof(*r));
	if (!r) {
		protobuf_c_message_free_unpacked(mi, NULL);
		return -ENOMEM;
	}
	cis__open_reply__init(r);
	out->msg = &r->base;
	r->mount = (Cis__MountInfo *)mi;
	r->inode = inode_msg(&ino);
	return r->inode ? 0 : -ENOMEM;
}

static int h_get_mount(mst_master *m, const ProtobufCMessage *msg, mst_reply *out)
{
	const Cis__GetMountRequest *q = (const Cis__GetMountRequest *)msg;
	ProtobufCMessage *mi;
	int err = mst_mount_info(m, q->mount_id, &mi);
	if (err)
		return cis_fail(&out->em, err, "mount %llu: %s", (unsigned long long)q->mount_id,
		                err == -ENOENT ? "no such mount" : cis_strerror(err));
	ALLOC_REPLY(Cis__GetMountReply, cis__get_mount_reply__init, r);
	out->msg = &r->base;
	r->mount = (Cis__MountInfo *)mi;
	return 0;
}

static int h_worker_list(mst_master *m, const ProtobufCMessage *msg, mst_reply *out)
{
	const Cis__WorkerListRequest *q = (const Cis__WorkerListRequest *)msg;
	return mst_workers_list(m->workers, q->known_version, &out->msg);
}

static int h_register(mst_master *m, const ProtobufCMessage *msg, mst_reply *out)
{
	return mst_workers_register(m->workers, msg, &out->msg, &out->em);
}

static int h_heartbeat(mst_master *m, const ProtobufCMessage *msg, mst_reply *out)
{
	return mst_workers_heartbeat(m->workers, msg, &out->msg, &out->em);
}

static int h_report(mst_master *m, const ProtobufCMessage *msg, mst_reply *out)
{
	return mst_workers_report(m->workers, msg, &out->msg, &out->em);
}

static const struct route {
	uint16_t type;
	const ProtobufCMessageDescriptor *desc;
	int (*fn)(mst_master *m, const ProtobufCMessage *msg, mst_reply *out);
} routes[] = {
    {CIS_MSG_MASTER_LOOKUP, &cis__lookup_request__descriptor, h_lookup},
    {CIS_MSG_MASTER_GETATTR, &cis__get_attr_request__descriptor, h_getattr},
    {CIS_MSG_MASTER_READDIR, &cis__read_dir_request__descriptor, h_readdir},
    {CIS_MSG_MASTER_OPEN, &cis__open_request__descriptor, h_open},
    {CIS_MSG_MASTER_GET_MOUNT, &cis__get_mount_request__descriptor, h_get_mount},
    {CIS_MSG_MASTER_WORKER_LIST, &cis__worker_list_request__descriptor, h_worker_list},
    {CIS_MSG_MASTER_REGISTER_WORKER, &cis__register_worker_request__descriptor, h_register},
    {CIS_MSG_MASTER_HEARTBEAT, &cis__heartbeat_request__descriptor, h_heartbeat},
    {CIS_MSG_MASTER_BLOCK_REPORT, &cis__block_report_request__descriptor, h_report},
};

static void dispatch(mst_master *m, uint16_t type, const uint8_t *msg, size_t len, mst_reply *out)
{
	const struct route *rt = NULL;
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (routes[i].type == type)
			rt = &routes[i];
	if (!rt) {
		out->code = cis_fail(&out->em, -CIS_E_PROTO, "unknown message type %u", type);
		return;
	}
	ProtobufCMessage *req;
	int err = cis_msg_unpack(rt->desc, msg, len, &req);
	if (err) {
		out->code =
		    cis_fail(&out->em, -CIS_E_PROTO, "malformed %s message", rt->desc->short_name);
		return;
	}
	err = rt->fn(m, req, out);
	protobuf_c_message_free_unpacked(req, NULL);
	if (err) {
		if (out->msg)
			protobuf_c_message_free_unpacked(out->msg, NULL);
		out->msg = NULL;
		out->code = err;
		if (!out->em.text[0])
			cis_fail(&out->em, err, "%s", cis_strerror(err));
	}
}

static void count_reply(mst_master *m, const mst_reply *out)
{
	cis_counter_inc(m->c_rpc_requests);
	if (out->code)
		cis_counter_inc(m->c_rpc_errors);
}

void mst_rpc_dispatch(mst_master *m, uint16_t type, const uint8_t *msg, size_t len, mst_reply *out)
{
	dispatch(m, type, msg, len, out);
	count_reply(m, out);
}

bool mst_rpc_dispatch_quick(mst_master *m, uint16_t type, const uint8_t *msg, size_t len,
                            mst_reply *out)
{
	mst_ns_refuse_store_waits(true);
	dispatch(m, type, msg, len, out);
	bool would_wait = mst_ns_store_wait_refused();
	mst_ns_refuse_store_waits(false);
	if (would_wait) {
		mst_reply_clear(out);
		return false;
	}
	count_reply(m, out);
	return true;
}
