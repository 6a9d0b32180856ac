/*
 * The listeners: AF_VSOCK (VM mode: envd's port, and the forwarder's unless
 * turned off) or one hybrid-vsock Unix socket (process mode: the port is in
 * the handshake).
 */
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct listener {
	struct ep_tag tag;
	int fd;
	unsigned port;    /* vsock: the port to bind; hybrid: 0 */
	unsigned serves;  /* what its connections are for: ENVD_PORT, FORWARD_PORT, 0 (the handshake says) */
	bool registered;
	int64_t retry_at; /* re-register after EMFILE, or retry the vsock listener */
	unsigned failures;
};

static struct listener lsts[2] = { { .tag = { EP_LISTENER }, .fd = -1, .retry_at = -1 },
				   { .tag = { EP_LISTENER }, .fd = -1, .retry_at = -1 } };
static unsigned n_lsts;
static bool full; /* paused: as many connections as descriptors allow */

static void arm(struct listener *l, bool on)
{
	if (l->fd < 0 || l->registered == on)
		return;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &l->tag };
	if (epoll_ctl(epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, l->fd, &ev) < 0)
		ilog("epoll_ctl (listener): %s", strerror(errno));
	else
		l->registered = on;
}

static int open_hybrid(void)
{
	if (cfg.hybrid_fd >= 0) {
		int fd = cfg.hybrid_fd;
		int type = 0;
		socklen_t len = sizeof type;
		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM ||
		    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
			ilog("--hybrid-fd %d: not a listening stream socket (%s)", fd, strerror(errno));
			return -1;
		}
		ilog("listening on fd %d (hybrid vsock, ports %u%s)", fd, ENVD_PORT, cfg.forward_ports ? " and 49982" : "");
		return fd;
	}
	/*
	 * Bound and listening under a temporary name, then renamed into place: the
	 * socket appears at its path only once it accepts. The host may move it away
	 * as soon as it appears (gVisor: out of the directory the sandbox shares),
	 * and a bind that is still settling then fails (gVisor looks the new socket
	 * up by name after its gofer created it: ENOENT, and PID 1 had no listener).
	 */
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	if (snprintf(sun.sun_path, sizeof sun.sun_path, "%s.tmp", cfg.hybrid_path) >= (int)sizeof sun.sun_path) {
		ilog("--hybrid-listen %s: path too long for a Unix socket", cfg.hybrid_path);
		return -1;
	}
	struct stat st;
	if (lstat(sun.sun_path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(sun.sun_path); /* left by an earlier run */
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	bool bound = fd >= 0 && bind(fd, (struct sockaddr *)&sun, sizeof sun) == 0;
	if (!bound || chmod(sun.sun_path, 0660) < 0 || listen(fd, 4096) < 0 || rename(sun.sun_path, cfg.hybrid_path) < 0) {
		int err = errno;
		if (bound)
			unlink(sun.sun_path); /* ours; never what was there before */
		if (fd >= 0)
			close(fd);
		ilog("cannot listen on %s: %s", cfg.hybrid_path, strerror(err));
		return -1;
	}
	if (cfg.forward_ports)
		ilog("listening on unix:%s (hybrid vsock, ports %u and %u)", cfg.hybrid_path, ENVD_PORT, FORWARD_PORT);
	else
		ilog("listening on unix:%s (hybrid vsock, port %u)", cfg.hybrid_path, ENVD_PORT);
	return fd;
}

static int open_vsock(struct listener *l)
{
	struct sockaddr_vm svm = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = l->port };
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&svm, sizeof svm) < 0 || listen(fd, 4096) < 0) {
		if (l->failures++ % 30 == 0)
			ilog("cannot listen on vsock port %u: %s", l->port, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	ilog("listening on vsock port %u%s", l->port, l->serves == FORWARD_PORT ? " (port forwarding)" : "");
	return fd;
}

/* `CONNECT <port>` (the newline cut off): Firecracker's host-initiated handshake. */
unsigned handshake_port(const char *line, size_t len)
{
	while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	if (len < 9 || len > 8 + 10 || memcmp(line, "CONNECT ", 8) != 0)
		return 0;
	unsigned long port = 0;
	for (size_t i = 8; i < len; i++) {
		if (line[i] < '0' || line[i] > '9')
			return 0;
		port = port * 10 + (unsigned long)(line[i] - '0');
	}
	if (port == ENVD_PORT || (port == FORWARD_PORT && cfg.forward_ports))
		return (unsigned)port;
	return 0;
}

static int open_listener(struct listener *l)
{
	l->fd = cfg.mode == MODE_HYBRID ? open_hybrid() : open_vsock(l);
	if (l->fd < 0) {
		l->retry_at = now_ms() + 1000; /* VM mode: the vsock transport may still be coming up */
		return -1;
	}
	l->failures = 0;
	l->retry_at = -1;
	arm(l, !full);
	return l->registered || full ? 0 : -1;
}

int bridge_listen(void)
{
	if (!n_lsts) {
		n_lsts = 1;
		lsts[0].port = cfg.mode == MODE_HYBRID ? 0 : cfg.vsock_port;
		lsts[0].serves = cfg.mode == MODE_HYBRID ? 0 : ENVD_PORT;
		if (cfg.mode != MODE_HYBRID && cfg.forward_ports) {
			lsts[1].port = lsts[1].serves = FORWARD_PORT;
			n_lsts = 2;
		}
	}
	int r = 0;
	for (unsigned i = 0; i < n_lsts; i++)
		if (lsts[i].fd < 0 && open_listener(&lsts[i]) < 0)
			r = -1;
	return r;
}

void listener_event(struct ep_tag *tag)
{
	struct listener *l = (struct listener *)tag;
	if (l->fd < 0 || shutting_down)
		return;
	for (int i = 0; i < 128; i++) {
		if (!bridge_has_room()) {
			listener_pause(true);
			return;
		}
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			bridge_accepted(fd, l->serves);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
			continue;
		if (errno == EAGAIN)
			return;
		/* EMFILE and the like: stop accepting for a moment rather than spin. */
		if (l->failures++ % 100 == 0)
			ilog("accept: %s", strerror(errno));
		arm(l, false);
		l->retry_at = now_ms() + 100;
		return;
	}
}

/* Full: stop accepting (connections wait in the backlog); no longer full: accept again. */
void listener_pause(bool now_full)
{
	if (full == now_full)
		return;
	full = now_full;
	if (full) {
		static bool told;
		if (!told)
			ilog("open files limit reached: new connections wait until others close");
		told = true;
	}
	for (unsigned i = 0; i < n_lsts; i++)
		if (lsts[i].retry_at < 0)
			arm(&lsts[i], !full);
}

int64_t listener_deadline(void)
{
	int64_t dl = -1;
	for (unsigned i = 0; i < n_lsts; i++)
		if (lsts[i].retry_at >= 0 && (dl < 0 || lsts[i].retry_at < dl))
			dl = lsts[i].retry_at;
	return dl;
}

void listener_tick(int64_t now)
{
	for (unsigned i = 0; i < n_lsts; i++) {
		struct listener *l = &lsts[i];
		if (l->retry_at < 0 || now < l->retry_at)
			continue;
		if (l->fd < 0) {
			open_listener(l);
		} else {
			l->retry_at = -1;
			arm(l, !full);
		}
	}
}

void listener_close(void)
{
	for (unsigned i = 0; i < n_lsts; i++) {
		struct listener *l = &lsts[i];
		if (l->fd < 0)
			continue;
		arm(l, false); /* before close: a forked child may briefly share the descriptor */
		close(l->fd);
		l->fd = -1;
		l->retry_at = -1;
		if (cfg.mode == MODE_HYBRID && cfg.hybrid_path)
			unlink(cfg.hybrid_path);
	}
	n_lsts = 0; /* no retries after shutdown */
}
