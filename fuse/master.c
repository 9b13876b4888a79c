/* The master's RPC as the client uses it: namespace (Lookup, GetAttr,
 * ReadDir), Open (attributes and mount), and the versioned worker list. */
#include "client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cistern/config.h"
#include "cistern/frame.h"
#include "cistern/log.h"
#include "cistern/msgtype.h"
#include "cistern/time.h"

#define MASTER_TIMEOUT_MS 30000

/* A call with a single reply unpacked as desc. *out is the caller's. */
static int call(cis_rpc_client *cl, uint16_t type, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out, int timeout_ms,
                cis_errmsg *em)
{
	cis_rpc_result res;
	memset(&res, 0, sizeof(res));
	res.fd = -1;
	int rc = cis_rpc_call(cl, type, req, NULL, 0, &res, timeout_ms, em);
	if (rc)
		return rc;
	rc = cis_msg_unpack(desc, res.msg, res.msg_len, out);
	if (rc)
		cis_fail(em, rc, "reply to message type %u did not decode", type);
	cis_rpc_result_free(&res);
	return rc;
}

int fcl_master_connect(fcl *c, cis_errmsg *em)
{
	if (cis_parse_hostport(c->opts->master, c->master_host, sizeof(c->master_host),
	                       &c->master_port))
		return cis_fail(em, -CIS_E_CONFIG, "master: bad address '%s'", c->opts->master);
	cis_rpc_client_opts o = {
	    .host = c->master_host,
	    .port = c->master_port,
	    .name = "cistern-fuse",
	    .call_timeout_ms = MASTER_TIMEOUT_MS,
	};
	int rc = cis_rpc_client_new(&o, &c->master);
	if (rc)
		return cis_fail(em, rc, "master client: %s", cis_strerror(rc));
	return 0;
}

void fcl_attr_from_inode(const Cis__Inode *in, fcl_attr *a)
{
	*a = (fcl_attr){
	    .ino = in->id,
	    .is_dir = in->type == CIS__INODE_TYPE__INODE_DIR,
	    .is_link = in->type == CIS__INODE_TYPE__INODE_LINK,
	    .size = in->size,
	    .mtime_ns = in->mtime_ns,
	    .mode = in->mode & 07777,
	    .nlink = in->nlink ? in->nlink : (in->type == CIS__INODE_TYPE__INODE_DIR ? 2 : 1),
	};
	if (a->mode == 0)
		a->mode = a->is_dir ? 0755 : a->is_link ? 0777 : 0644;
	if (!a->is_dir && !a->is_link && in->version && in->version[0])
		a->vhash = fcl_version_hash(in->version);
}

uint64_t fcl_version_hash(const char *version)
{
	return cis_hash64(version, strlen(version), 0) | 1; /* never 0 */
}

static void count_call(fcl *c, enum fcl_mop op)
{
	if (c->stats.master_calls[op])
		cis_counter_inc(c->stats.master_calls[op]);
}

static void note_master_error(fcl *c, int rc, const cis_errmsg *em)
{
	if (rc == -ENOENT || rc == -ENOTDIR || rc == -EINVAL || rc == -ENAMETOOLONG)
		return;
	if (c->stats.master_errors)
		cis_counter_inc(c->stats.master_errors);
	cis_log_limited(CIS_LOG_WARN, "master-call", 10, "master request failed", "err=\"%s\"",
	                cis_errmsg_or(em, rc));
}

int fcl_master_lookup(void *ctx, uint64_t parent, const char *name, fcl_attr *out, cis_errmsg *em)
{
	fcl *c = ctx;
	count_call(c, FCL_MOP_LOOKUP);
	Cis__LookupRequest req = CIS__LOOKUP_REQUEST__INIT;
	req.parent = parent;
	req.name = (char *)name;
	Cis__LookupReply *rep = NULL;
	int rc = call(c->master, CIS_MSG_MASTER_LOOKUP, &req.base, &cis__lookup_reply__descriptor,
	              (ProtobufCMessage **)&rep, 0, em);
	if (rc) {
		note_master_error(c, rc, em);
		return rc;
	}
	if (!rep->inode)
		rc = cis_fail(em, -CIS_E_PROTO, "lookup reply without an inode");
	else
		fcl_attr_from_inode(rep->inode, out);
	cis__lookup_reply__free_unpacked(rep, NULL);
	return rc;
}

/* The inode as the master has it now; *rep is the caller's on success. */
static int getattr_call(fcl *c, uint64_t ino, Cis__GetAttrReply **rep, cis_errmsg *em)
{
	count_call(c, FCL_MOP_GETATTR);
	Cis__GetAttrRequest req = CIS__GET_ATTR_REQUEST__INIT;
	req.inode = ino;
	int rc = call(c->master, CIS_MSG_MASTER_GETATTR, &req.base,
	              &cis__get_attr_reply__descriptor, (ProtobufCMessage **)rep, 0, em);
	if (rc) {
		note_master_error(c, rc, em);
		return rc;
	}
	if (!(*rep)->inode) {
		cis__get_attr_reply__free_unpacked(*rep, NULL);
		return cis_fail(em, -CIS_E_PROTO, "getattr reply without an inode");
	}
	return 0;
}

int fcl_master_getattr(void *ctx, uint64_t ino, fcl_attr *out, cis_errmsg *em)
{
	Cis__GetAttrReply *rep;
	int rc = getattr_call(ctx, ino, &rep, em);
	if (rc)
		return rc;
	fcl_attr_from_inode(rep->inode, out);
	cis__get_attr_reply__free_unpacked(rep, NULL);
	return 0;
}

int fcl_master_readlink(fcl *c, uint64_t ino, char **target, cis_errmsg *em)
{
	Cis__GetAttrReply *rep;
	int rc = getattr_call(c, ino, &rep, em);
	if (rc)
		return rc;
	if (rep->inode->type != CIS__INODE_TYPE__INODE_LINK || !rep->inode->link_target ||
	    !rep->inode->link_target[0])
		rc = cis_fail(em, -EINVAL, "inode %llu: not a symbolic link",
		              (unsigned long long)ino);
	else if (!(*target = strdup(rep->inode->link_target)))
		rc = -ENOMEM;
	cis__get_attr_reply__free_unpacked(rep, NULL);
	return rc;
}

int fcl_master_resolve(fcl *c, const char *path, fcl_attr *out, cis_errmsg *em)
{
	int rc = fcl_master_getattr(c, 1, out, em);
	if (rc)
		return rc;
	char *copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	char *save = NULL;
	for (char *comp = strtok_r(copy, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
		rc = fcl_master_lookup(c, out->ino, comp, out, em);
		if (rc) {
			if (rc == -ENOENT)
				cis_fail(em, rc, "%s: no such directory in the namespace", path);
			break;
		}
	}
	free(copy);
	if (rc == 0 && !out->is_dir)
		rc = cis_fail(em, -ENOTDIR, "%s: not a directory", path);
	return rc;
}

int fcl_master_readdir(fcl *c, uint64_t ino, uint64_t cookie, uint32_t max, Cis__ReadDirReply **out,
                       cis_errmsg *em)
{
	count_call(c, FCL_MOP_READDIR);
	Cis__ReadDirRequest req = CIS__READ_DIR_REQUEST__INIT;
	req.inode = ino;
	req.cookie = cookie;
	req.max = max;
	int rc = call(c->master, CIS_MSG_MASTER_READDIR, &req.base,
	              &cis__read_dir_reply__descriptor, (ProtobufCMessage **)out, 0, em);
	if (rc)
		note_master_error(c, rc, em);
	return rc;
}

/* Find or make the mount; c->lock held by the caller. */
static fcl_mount *do_mount_get(fcl *c, const Cis__MountInfo *mi)
{
	for (fcl_mount *m = c->mounts; m; m = m->next)
		if (m->id == mi->id)
			return m;
	fcl_mount *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->id = mi->id;
	m->uri = strdup(mi->uri ? mi->uri : "");
	m->block_size = mi->block_size ? mi->block_size : FCL_DEFAULT_BLOCK;
	bool ok = m->uri != NULL;
	for (size_t i = 0; ok && i < mi->n_options; i++)
		ok = cis_kvlist_set(&m->options, mi->options[i]->key, mi->options[i]->value) == 0;
	if (!ok) {
		cis_kvlist_free(&m->options);
		free(m->uri);
		free(m);
		return NULL;
	}
	pthread_mutex_init(&m->lock, NULL);
	m->next = c->mounts;
	c->mounts = m;
	return m;
}

void fcl_mounts_free(fcl *c)
{
	fcl_mount *m = c->mounts;
	while (m) {
		fcl_mount *next = m->next;
		if (m->ufs)
			cis_ufs_close(m->ufs);
		cis_kvlist_free(&m->options);
		free(m->uri);
		pthread_mutex_destroy(&m->lock);
		free(m);
		m = next;
	}
	c->mounts = NULL;
}

/* A handle from what Open says; takes key. NULL on ENOMEM. */
static fcl_file *file_new(fcl *c, uint64_t ino, const fcl_open_info *oi, char *key)
{
	fcl_file *f = calloc(1, sizeof(*f));
	if (!f) {
		free(key);
		return NULL;
	}
	f->refs = 1;
	f->ino = ino;
	f->mount = oi->mount;
	f->key = key;
	memcpy(f->version, oi->version, sizeof(f->version));
	f->vhash = fcl_version_hash(f->version);
	f->size = oi->size;
	f->block_size = oi->block_size;
	f->answered = oi->answered;
	pthread_mutex_init(&f->lock, NULL);
	uint64_t budget_blocks = c->opts->readahead_budget / f->block_size;
	fcl_ra_init(&f->ra, budget_blocks ? budget_blocks : 1, FCL_RA_SLACK_HANDLE);
	return f;
}

int fcl_master_open(fcl *c, uint64_t ino, fcl_file **out, bool *hit, cis_errmsg *em)
{
	fcl_open_info oi;
	*hit = false;
	/* A version a read found changed: the master checks the store. */
	char stale[CIS_UFS_VERSION_MAX] = "";
	(void)fcl_lru_remove(c->changed, &ino, sizeof(ino), stale);
	int rc = stale[0] ? -ENOENT : fcl_meta_get_open(c->meta, ino, &oi);
	if (rc == 0) {
		*out = file_new(c, ino, &oi, oi.key);
		*hit = *out != NULL;
		return *out ? 0 : -ENOMEM;
	}
	count_call(c, FCL_MOP_OPEN);
	Cis__OpenRequest req = CIS__OPEN_REQUEST__INIT;
	req.inode = ino;
	req.stale_version = stale;
	Cis__OpenReply *rep = NULL;
	rc = call(c->master, CIS_MSG_MASTER_OPEN, &req.base, &cis__open_reply__descriptor,
	          (ProtobufCMessage **)&rep, 0, em);
	uint64_t ticket = fcl_meta_ticket(c->meta); /* the answer's arrival */
	if (rc) {
		note_master_error(c, rc, em);
		if (stale[0]) /* the master did not hear it: the next open tells it */
			(void)fcl_lru_put(c->changed, &ino, sizeof(ino), stale, NULL, NULL);
		return rc;
	}
	if (!rep->inode || !rep->mount) {
		rc = cis_fail(em, -CIS_E_PROTO, "open reply without inode or mount");
		goto out_reply;
	}
	if (rep->inode->type == CIS__INODE_TYPE__INODE_DIR) {
		rc = -EISDIR;
		goto out_reply;
	}
	pthread_mutex_lock(&c->lock);
	oi.mount = do_mount_get(c, rep->mount);
	pthread_mutex_unlock(&c->lock);
	oi.key = strdup(rep->inode->key ? rep->inode->key : "");
	if (!oi.mount || !oi.key) {
		free(oi.key);
		rc = -ENOMEM;
		goto out_reply;
	}
	snprintf(oi.version, sizeof(oi.version), "%s",
	         rep->inode->version ? rep->inode->version : "");
	oi.size = rep->inode->size;
	oi.answered = ticket;
	oi.block_size = rep->mount->block_size ? rep->mount->block_size : oi.mount->block_size;
	fcl_attr a;
	fcl_attr_from_inode(rep->inode, &a);
	/* Cached only with a version: without one a change could not be told. */
	if (oi.version[0])
		fcl_meta_put_open(c->meta, &a, &oi);
	else
		fcl_meta_put_attr(c->meta, &a, ticket);
	*out = file_new(c, ino, &oi, oi.key);
	if (!*out)
		rc = -ENOMEM;
out_reply:
	cis__open_reply__free_unpacked(rep, NULL);
	return rc;
}

void fcl_file_ref(fcl_file *f)
{
	__atomic_add_fetch(&f->refs, 1, __ATOMIC_RELAXED);
}

void fcl_file_unref(fcl_file *f)
{
	if (!f || __atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	pthread_mutex_destroy(&f->lock);
	free(f->key);
	free(f);
}

/* ---- worker list ---- */

static void wlist_free(fcl_wlist *wl)
{
	if (!wl)
		return;
	free(wl->ids);
	free(wl->w);
	free(wl);
}

int fcl_workers_init(fcl *c)
{
	c->workers = calloc(1, sizeof(*c->workers));
	if (!c->workers)
		return -ENOMEM;
	c->workers->refs = 1;
	return 0;
}

void fcl_workers_fini(fcl *c)
{
	fcl_workers_put(c, c->workers);
	c->workers = NULL;
}

void fcl_cluster_space(fcl *c, uint64_t *capacity, uint64_t *used)
{
	uint64_t now = cis_mono_ms();
	pthread_mutex_lock(&c->lock);
	bool ask = !c->space.asked_ms || now - c->space.asked_ms >= FCL_SPACE_MS;
	if (ask)
		c->space.asked_ms = now; /* one asker at a time; a failure waits too */
	*capacity = c->space.capacity;
	*used = c->space.used;
	pthread_mutex_unlock(&c->lock);
	if (!ask)
		return;
	/* Known version 0: the whole list, with the figures of the workers'
	 * last heartbeats (the list's version moves only with membership). */
	Cis__WorkerListRequest req = CIS__WORKER_LIST_REQUEST__INIT;
	Cis__WorkerListReply *rep = NULL;
	cis_errmsg em = {{0}};
	int rc = call(c->master, CIS_MSG_MASTER_WORKER_LIST, &req.base,
	              &cis__worker_list_reply__descriptor, (ProtobufCMessage **)&rep,
	              FCL_SPACE_MS * 2, &em);
	if (rc) {
		cis_log_limited(CIS_LOG_WARN, "statfs", 60,
		                "statfs: the master did not answer; last known sizes", "err=\"%s\"",
		                cis_errmsg_or(&em, rc));
		return;
	}
	uint64_t cap = 0, use = 0;
	for (size_t i = 0; i < rep->n_workers; i++) {
		cap += rep->workers[i]->capacity;
		use += rep->workers[i]->used;
	}
	cis__worker_list_reply__free_unpacked(rep, NULL);
	pthread_mutex_lock(&c->lock);
	c->space.capacity = cap;
	c->space.used = use;
	pthread_mutex_unlock(&c->lock);
	*capacity = cap;
	*used = use;
}

fcl_wlist *fcl_workers_get(fcl *c)
{
	pthread_mutex_lock(&c->lock);
	fcl_wlist *wl = c->workers;
	wl->refs++;
	pthread_mutex_unlock(&c->lock);
	return wl;
}

void fcl_workers_put(fcl *c, fcl_wlist *wl)
{
	pthread_mutex_lock(&c->lock);
	bool last = --wl->refs == 0;
	pthread_mutex_unlock(&c->lock);
	if (last)
		wlist_free(wl);
}

static bool is_socket(const char *path)
{
	struct stat st;
	return path[0] && stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

int fcl_workers_refresh(fcl *c, cis_errmsg *em)
{
	pthread_mutex_lock(&c->lock);
	uint64_t known = c->workers->version;
	pthread_mutex_unlock(&c->lock);

	Cis__WorkerListRequest req = CIS__WORKER_LIST_REQUEST__INIT;
	req.known_version = known;
	Cis__WorkerListReply *rep = NULL;
	int rc = call(c->master, CIS_MSG_MASTER_WORKER_LIST, &req.base,
	              &cis__worker_list_reply__descriptor, (ProtobufCMessage **)&rep, 10000, em);
	if (rc)
		return rc;
	if (rep->unchanged && known != 0)
		goto out_reply;
	fcl_wlist *wl = calloc(1, sizeof(*wl));
	size_t n = rep->n_workers;
	if (wl) {
		wl->ids = calloc(n ? n : 1, sizeof(*wl->ids));
		wl->w = calloc(n ? n : 1, sizeof(*wl->w));
	}
	if (!wl || !wl->ids || !wl->w) {
		wlist_free(wl);
		rc = -ENOMEM;
		goto out_reply;
	}
	wl->refs = 1;
	wl->version = rep->version;
	for (size_t i = 0; i < n; i++) {
		const Cis__WorkerInfo *wi = rep->workers[i];
		bool dup = false;
		for (size_t j = 0; j < wl->n; j++)
			dup |= wl->ids[j] == wi->id;
		if (dup || wi->rpc_port > 65535)
			continue; /* placement needs unique ids */
		fcl_worker *w = &wl->w[wl->n];
		w->id = wi->id;
		snprintf(w->host, sizeof(w->host), "%s", wi->host ? wi->host : "");
		w->port = (uint16_t)wi->rpc_port;
		w->boot_id = wi->boot_id;
		snprintf(w->unix_path, sizeof(w->unix_path), "%s",
		         wi->unix_socket ? wi->unix_socket : "");
		w->local = !c->opts->no_short_circuit && wi->hostname &&
		           strcmp(wi->hostname, c->hostname) == 0 && is_socket(w->unix_path);
		wl->ids[wl->n++] = wi->id;
	}
	pthread_mutex_lock(&c->lock);
	fcl_wlist *old = c->workers;
	c->workers = wl;
	bool last = --old->refs == 0;
	pthread_mutex_unlock(&c->lock);
	if (last)
		wlist_free(old);
	cis_info("worker list updated", "version=%llu workers=%zu", (unsigned long long)wl->version,
	         wl->n);
out_reply:
	cis__worker_list_reply__free_unpacked(rep, NULL);
	return rc;
}
