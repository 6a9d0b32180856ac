/*
 * locale2b-init: the guest init of locale2b sandboxes.
 *
 * VM mode (PID 1, no --hybrid-listen): mounts, hostname, clock, loopback,
 * reaping and poweroff; supervises envd and bridges AF_VSOCK port 49983 to
 * envd's Unix socket. Process mode (--hybrid-listen PATH): the same envd
 * supervision and bridge, but the host side is a Unix socket that speaks
 * Firecracker's hybrid-vsock handshake (`CONNECT 49983\n` -> `OK 49983\n`).
 *
 * User-port forwarding: vsock port 49982 (or `CONNECT 49982`), then
 * `TCP <port>\n` -> `OK\n`, and the bytes go to 127.0.0.1:<port>.
 *
 * Files: main.c (flags, event loop, shutdown), pid1.c (system set-up,
 * reaping, poweroff), envd.c (envd's supervision), listener.c (vsock or
 * hybrid-vsock listeners), bridge.c (the relay), forward.c (the forwarder's
 * request and its TCP connect), spawn.c (`--spawn-helper`: starts envd's
 * processes without forking envd), sendfile.c (`--sendfile`: a large
 * download's bytes from the file to envd's socket without copies), receive.c
 * (`--receive`: a large upload's bytes from envd's socket to the file, the
 * same way).
 */
#ifndef LOCALE2B_INIT_H
#define LOCALE2B_INIT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ENVD_PORT 49983
/* The user-port forwarder: `TCP <port>\n` (at most FORWARD_LINE_MAX bytes) -> 127.0.0.1:<port>. */
#define FORWARD_PORT 49982
#define FORWARD_LINE_MAX 32
#define FORWARD_CONNECT_TIMEOUT_MS 10000
/* Per direction and connection; when full, that side is not read (back-pressure). */
#define RELAY_BUF (256 * 1024)
/* The hybrid-vsock handshake line, newline included. */
#define HANDSHAKE_MAX 64
#define HANDSHAKE_TIMEOUT_MS 10000
/* How long a connection waits for envd's socket to accept (envd under TCG starts slowly). */
#define UPSTREAM_WAIT_MS 30000
/* Shutdown: SIGTERM, then SIGKILL after this long. */
#define TERM_GRACE_MS 2000
#define KILL_WAIT_MS 1000
#define WANT_NOFILE 65536

#define GUEST_INIT "/sbin/locale2b-init"
/* envd's own Node (GUEST.node in control-plane/images/layout.ts), not the user's /usr/local/bin/node. */
#define GUEST_NODE "/opt/locale2b/node/bin/node"
#define GUEST_ENVD "/opt/locale2b/envd/envd.js"
/*
 * Node's flag for envd (GUEST.nodeFlags in control-plane/images/layout.ts):
 * a 2 MiB young generation (Node's default grows to 16) is collected more
 * often while output streams through, so the chunks it has already sent are
 * freed sooner: about 10 MiB less peak memory, no measurable CPU cost.
 */
#define GUEST_NODE_FLAG "--max-semi-space-size=2"
#define GUEST_ENVD_SOCKET "/run/locale2b/envd.sock"
#define GUEST_USER "user"
#define GUEST_HOME "/home/user"
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

enum mode {
	MODE_VM,     /* PID 1 of a VM: AF_VSOCK, full system set-up */
	MODE_HYBRID, /* process runtime / tests: hybrid-vsock Unix socket */
	MODE_VSOCK,  /* like MODE_HYBRID but listening on AF_VSOCK (exercises the VM listener) */
};

#define MAX_ARGS 64

/*
 * Process mode: close the host-facing listener and connections (before a
 * checkpoint), and open it again. runsc kill sends only signals 1-31; these two
 * are ignored by default, so an init without this support just ignores them.
 */
#define SIG_QUIESCE SIGURG
#define SIG_RELISTEN SIGWINCH

struct config {
	enum mode mode;
	bool pid1;
	bool print_config;
	bool no_mounts;
	bool forward_ports;        /* VM: on unless l2b.forward_ports=0; process mode: --forward-ports */
	const char *hybrid_path;   /* MODE_HYBRID: a socket to create, or */
	int hybrid_fd;             /* MODE_HYBRID: an inherited listening socket (-1: none) */
	unsigned vsock_port;       /* MODE_VM, MODE_VSOCK */
	const char *hostname;      /* flag, else l2b.hostname=, else /etc/hostname (VM) */
	long long epoch;           /* l2b.epoch= (VM), 0 when absent */
	const char *envd_log;      /* --envd-log or l2b.envd_log= */
	const char *envd_socket;   /* --envd-socket, else GUEST_ENVD_SOCKET */
	const char *self;          /* argv[0]: where this binary is, for envd's spawn helper */
	const char *envd_cmd;      /* --envd-cmd: replaces the default command */
	const char *envd_args[MAX_ARGS];
	int n_envd_args;
	const char *env[MAX_ARGS]; /* --env KEY=VALUE */
	int n_env;
	const char *cmdline_file;  /* /proc/cmdline, or --cmdline-file (tests) */
};

extern struct config cfg;
extern int epfd;
extern bool shutting_down;

/* What an epoll event's data.ptr points at: every registered object starts with one. */
enum ep_kind { EP_SIGNAL, EP_LISTENER, EP_CONN };
struct ep_tag {
	enum ep_kind kind;
};

/* A relayed connection (bridge.c, forward.c). */
enum cstate {
	ST_HANDSHAKE,  /* hybrid mode: waiting for `CONNECT <port>\n` */
	ST_PENDING,    /* waiting to retry envd's socket */
	ST_CONNECTING, /* a non-blocking connect (to envd, or to the forwarded TCP port) in progress */
	ST_RELAY,
	ST_REQUEST,    /* forwarder: waiting for `TCP <port>\n` */
	ST_CLOSING,    /* writing what is buffered for the host (an `ERR` line), then closing */
};

struct buf {
	char *data; /* RELAY_BUF bytes, allocated on first use */
	uint32_t head, len;
};

struct conn;
struct endpoint {
	struct ep_tag tag;
	int fd;
	uint32_t mask; /* the events registered; 0 = not in the epoll set */
	bool eof;      /* read returned 0 */
	bool hup;      /* ...and the peer had closed, not just shut down its writing side */
	bool shut;     /* we did shutdown(SHUT_WR) */
	struct conn *c;
};

struct conn {
	struct endpoint a, b; /* a: the host (vsock / hybrid socket), b: envd or the forwarded port */
	struct buf ab, ba;
	enum cstate state;
	bool dead;
	unsigned fwd_port; /* the forwarded TCP port once requested; 0 for envd */
	char hs[HANDSHAKE_MAX];
	uint32_t hslen;
	int64_t deadline; /* handshake, request, connect, or giving up on envd's socket */
	int64_t retry_at;
	int retry_ms;
	struct conn *prev, *next;
};

/* main.c */
void ilog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int64_t now_ms(void);
void request_shutdown(const char *why);

/* pid1.c */
void parse_kernel_cmdline(void);
void vm_setup(void);
void process_setup(void);
void raise_nofile(void);
void mkdir_parents(const char *path, mode_t mode);
/* Reaps every exited child (passing envd's to envd_exited); false once no child is left. */
bool reap_children(void);
void signal_all(int sig);
void __attribute__((noreturn)) finish(int code);

/* envd.c */
void envd_start(void);
void envd_exited(pid_t pid, int status);
int64_t envd_deadline(void);
void envd_tick(int64_t now);
void envd_stop(void);
pid_t envd_pid(void);
void envd_print_argv(void);

/* listener.c */
int bridge_listen(void);
void listener_event(struct ep_tag *tag);
void listener_pause(bool full);
/* The port of a `CONNECT <port>` line (newline cut off) that is served here, else 0. */
unsigned handshake_port(const char *line, size_t len);
int64_t listener_deadline(void);
void listener_tick(int64_t now);
void listener_close(void);

/* bridge.c */
/* port: what the listener serves (ENVD_PORT, FORWARD_PORT), 0 for a hybrid-vsock handshake first. */
void bridge_accepted(int fd, unsigned port);
bool bridge_has_room(void);
void bridge_event(struct ep_tag *tag, uint32_t events);
int64_t bridge_deadline(void);
void bridge_tick(int64_t now);
void bridge_close_all(void);
void set_state(struct conn *c, enum cstate s);
void close_endpoint(struct endpoint *ep);
void conn_close(struct conn *c);
bool buf_ready(struct buf *b);
void buf_put(struct buf *b, const char *data, size_t len);
void relay_ready(struct conn *c);

/* sandbox.c: `--sandbox`, the process runtime's launcher (runs on the host as root) */
int sandbox_main(int argc, char **argv);
/* spawn.c: `--spawn-helper`, the process starter envd uses (spawn.c explains) */
int spawn_helper_main(void);
/* sendfile.c: `--sendfile OFFSET COUNT`, a file (stdin) to envd's socket (stdout) without copies */
int sendfile_main(int argc, char **argv);
/* sendfile.c, shared with receive.c: a command line's count, and poll() on a non-blocking socket */
bool parse_u64(const char *s, unsigned long long *out);
int wait_ready(int fd, short events);
/* receive.c: `--receive COUNT`, envd's socket (stdin) to a file (stdout) with splice */
int receive_main(int argc, char **argv);

/* confine.c: the capability bounding set and the seccomp filter of a sandbox */
int drop_capabilities(void);
int install_seccomp(void);

/* forward.c */
void forward_start(struct conn *c);
void forward_request(struct conn *c);
void forward_connected(struct conn *c, int err);
void forward_timeout(struct conn *c);
void conn_fail(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
