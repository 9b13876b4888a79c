/* Message type codes carried in the frame header. One range per service;
 * each request type's reply uses the same code with CIS_FRAME_REPLY. The
 * message for each code is named beside it (the .proto files in common/proto/). */
#ifndef CISTERN_MSGTYPE_H
#define CISTERN_MSGTYPE_H

enum cis_msgtype {
	/* 1..99: every connection (common.proto) */
	CIS_MSG_HELLO = 1, /* Hello -> HelloReply; first frame of a connection */
	CIS_MSG_PING = 2,  /* Ping -> Ping */

	/* 100..199: master RPC (master.proto) */
	CIS_MSG_MASTER_FIRST = 100,
	CIS_MSG_MASTER_LOOKUP = 100,          /* LookupRequest -> LookupReply */
	CIS_MSG_MASTER_GETATTR = 101,         /* GetAttrRequest -> GetAttrReply */
	CIS_MSG_MASTER_READDIR = 102,         /* ReadDirRequest -> ReadDirReply */
	CIS_MSG_MASTER_OPEN = 103,            /* OpenRequest -> OpenReply */
	CIS_MSG_MASTER_GET_MOUNT = 104,       /* GetMountRequest -> GetMountReply */
	CIS_MSG_MASTER_WORKER_LIST = 105,     /* WorkerListRequest -> WorkerListReply */
	CIS_MSG_MASTER_REGISTER_WORKER = 106, /* RegisterWorkerRequest -> ...Reply */
	CIS_MSG_MASTER_HEARTBEAT = 107,       /* HeartbeatRequest -> HeartbeatReply */
	CIS_MSG_MASTER_BLOCK_REPORT = 108,    /* BlockReportRequest -> ...Reply */

	/* 200..299: worker RPC (worker.proto) */
	CIS_MSG_WORKER_FIRST = 200,
	CIS_MSG_WORKER_READ_BLOCK = 200, /* ReadBlockRequest -> ReadBlockReply + data, streamed */
	CIS_MSG_WORKER_OPEN_LOCAL = 201, /* OpenLocalRequest -> OpenLocalReply + fd (Unix) */
	CIS_MSG_WORKER_RELEASE_LOCAL = 202, /* LeaseRequest -> LeaseReply */
	CIS_MSG_WORKER_RENEW_LOCAL = 203,   /* LeaseRequest -> LeaseReply */
	CIS_MSG_WORKER_PREFETCH = 204,      /* PrefetchRequest -> PrefetchReply (at once) */
	CIS_MSG_WORKER_LOAD = 205,          /* LoadRequest -> LoadReply (when done) */
	CIS_MSG_WORKER_REPLICATE = 206,     /* ReplicateRequest -> ReplicateReply */
	CIS_MSG_WORKER_FREE = 207,          /* FreeRequest -> FreeReply */
	CIS_MSG_WORKER_PIN = 208,           /* PinRequest -> PinReply */
	CIS_MSG_WORKER_STAT = 209,          /* StatRequest -> StatReply */
	CIS_MSG_WORKER_TOUCH = 210,         /* TouchRequest -> TouchReply */
};

#endif
