/* The listener: AF_VSOCK (VM mode) or a hybrid-vsock Unix socket (process mode). */
#include "init.h"

#include <errno.h>
#include <linux/vm_sockets.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static struct {
	struct ep_tag tag;
	int fd;
	bool registered;
	int64_t retry_at; /* re-register after EMFILE, or retry the vsock listener */
	unsigned failures;
	bool full; /* paused: as many connections as descriptors allow */
} lst = { { EP_LISTENER }, -1, false, -1, 0, false };

static void arm(bool on)
{
	if (lst.fd < 0 || lst.registered == on)
		return;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &lst.tag };
	if (epoll_ctl(epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, lst.fd, &ev) < 0)
		ilog("epoll_ctl (listener): %s", strerror(errno));
	else
		lst.registered = on;
}

static int open_hybrid(void)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	if (strlen(cfg.hybrid_path) >= sizeof sun.sun_path) {
		ilog("--hybrid-listen %s: path too long for a Unix socket", cfg.hybrid_path);
		return -1;
	}
	strcpy(sun.sun_path, cfg.hybrid_path);
	struct stat st;
	if (lstat(cfg.hybrid_path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(cfg.hybrid_path); /* a stale socket from an earlier run */
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof sun) < 0 || chmod(cfg.hybrid_path, 0660) < 0 ||
	    listen(fd, 4096) < 0) {
		ilog("cannot listen on %s: %s", cfg.hybrid_path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	ilog("listening on unix:%s (hybrid vsock, port %u)", cfg.hybrid_path, ENVD_PORT);
	return fd;
}

static int open_vsock(void)
{
	struct sockaddr_vm svm = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = cfg.vsock_port };
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&svm, sizeof svm) < 0 || listen(fd, 4096) < 0) {
		if (lst.failures++ % 30 == 0)
			ilog("cannot listen on vsock port %u: %s", cfg.vsock_port, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	ilog("listening on vsock port %u", cfg.vsock_port);
	return fd;
}

/* `CONNECT <port>` (the newline cut off) for envd's port: Firecracker's host-initiated handshake. */
bool handshake_line_ok(const char *line, size_t len)
{
	while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	if (len < 9 || len > 8 + 10 || memcmp(line, "CONNECT ", 8) != 0)
		return false;
	unsigned long port = 0;
	for (size_t i = 8; i < len; i++) {
		if (line[i] < '0' || line[i] > '9')
			return false;
		port = port * 10 + (unsigned long)(line[i] - '0');
	}
	return port == ENVD_PORT;
}

int bridge_listen(void)
{
	lst.fd = cfg.mode == MODE_HYBRID ? open_hybrid() : open_vsock();
	if (lst.fd < 0) {
		lst.retry_at = now_ms() + 1000; /* VM mode: the vsock transport may still be coming up */
		return -1;
	}
	lst.failures = 0;
	lst.retry_at = -1;
	arm(true);
	return lst.registered ? 0 : -1;
}

void listener_event(void)
{
	if (lst.fd < 0 || shutting_down)
		return;
	for (int i = 0; i < 128; i++) {
		if (!bridge_has_room()) {
			listener_pause(true);
			return;
		}
		int fd = accept4(lst.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			bridge_accepted(fd);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
			continue;
		if (errno == EAGAIN)
			return;
		/* EMFILE and the like: stop accepting for a moment rather than spin. */
		if (lst.failures++ % 100 == 0)
			ilog("accept: %s", strerror(errno));
		arm(false);
		lst.retry_at = now_ms() + 100;
		return;
	}
}

/* Full: stop accepting (connections wait in the backlog); no longer full: accept again. */
void listener_pause(bool full)
{
	if (lst.full == full)
		return;
	lst.full = full;
	if (full) {
		static bool told;
		if (!told)
			ilog("open files limit reached: new connections wait until others close");
		told = true;
	}
	if (lst.retry_at < 0)
		arm(!full);
}

int64_t listener_deadline(void)
{
	return lst.retry_at;
}

void listener_tick(int64_t now)
{
	if (lst.retry_at < 0 || now < lst.retry_at)
		return;
	if (lst.fd < 0) {
		bridge_listen();
	} else {
		lst.retry_at = -1;
		arm(!lst.full);
	}
}

void listener_close(void)
{
	if (lst.fd < 0)
		return;
	arm(false); /* before close: a forked child may briefly share the descriptor */
	close(lst.fd);
	lst.fd = -1;
	lst.retry_at = -1;
	if (cfg.mode == MODE_HYBRID)
		unlink(cfg.hybrid_path);
}
