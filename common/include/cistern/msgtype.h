/* Message type codes carried in the frame header. One range per service;
 * each request type's reply uses the same code with CIS_FRAME_REPLY. The
 * message for each code is named beside it (common/proto/*.proto). */
#ifndef CISTERN_MSGTYPE_H
#define CISTERN_MSGTYPE_H

enum cis_msgtype {
	/* 1..99: every connection (common.proto) */
	CIS_MSG_HELLO = 1, /* Hello -> HelloReply; first frame of a connection */
	CIS_MSG_PING = 2,  /* Ping -> Ping */

	/* 100..199: master RPC (master.proto) */
	CIS_MSG_MASTER_FIRST = 100,

	/* 200..299: worker RPC (worker.proto) */
	CIS_MSG_WORKER_FIRST = 200,
};

#endif
