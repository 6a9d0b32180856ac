/*
 * The relay: every connection accepted on the vsock (or hybrid-vsock Unix)
 * listener is joined to a new connection to envd's Unix socket, or (the
 * forwarder, see forward.c) to a TCP port on 127.0.0.1. One thread,
 * level-triggered epoll, non-blocking sockets. Per direction a ring buffer
 * of RELAY_BUF bytes: when it is full, that side is not read (back-pressure).
 * EOF on one side is passed on as shutdown(SHUT_WR) once its buffer drained;
 * a connection closes when both directions are done, or on any error.
 */
#include "init.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* Connections live on one of three lists: waiting (a timer applies), active, dead (freed after the batch). */
static struct conn *waiting, *active, *dead;
static unsigned n_conns;
/* Two descriptors per connection: accept only while both fit under RLIMIT_NOFILE. */
static unsigned max_conns;

static void list_del(struct conn **head, struct conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		*head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
}

static void list_add(struct conn **head, struct conn *c)
{
	c->prev = NULL;
	c->next = *head;
	if (*head)
		(*head)->prev = c;
	*head = c;
}

static struct conn **list_of(struct conn *c)
{
	if (c->dead)
		return &dead;
	return c->state == ST_RELAY ? &active : &waiting;
}

void set_state(struct conn *c, enum cstate s)
{
	struct conn **from = list_of(c);
	c->state = s;
	struct conn **to = list_of(c);
	if (from != to) {
		list_del(from, c);
		list_add(to, c);
	}
}

static void set_mask(struct endpoint *ep, uint32_t mask)
{
	if (ep->fd < 0 || mask == ep->mask)
		return;
	struct epoll_event ev = { .events = mask, .data.ptr = &ep->tag };
	int op = !mask ? EPOLL_CTL_DEL : !ep->mask ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
	if (epoll_ctl(epfd, op, ep->fd, &ev) < 0)
		ilog("epoll_ctl: %s", strerror(errno));
	ep->mask = mask;
}

void close_endpoint(struct endpoint *ep)
{
	if (ep->fd < 0)
		return;
	set_mask(ep, 0); /* before close: a forked child may briefly share the descriptor */
	close(ep->fd);
	ep->fd = -1;
}

void conn_close(struct conn *c)
{
	if (c->dead)
		return;
	list_del(list_of(c), c);
	c->dead = true;
	list_add(&dead, c);
	close_endpoint(&c->a);
	close_endpoint(&c->b);
	if (n_conns-- == max_conns)
		listener_pause(false);
}

bool bridge_has_room(void)
{
	if (!max_conns) {
		struct rlimit rl;
		rlim_t fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
		if (fds > 1000000)
			fds = 1000000;
		max_conns = fds > 96 ? (unsigned)(fds - 32) / 2 : 32; /* 32 spare: epoll, signalfd, stdio, fork */
	}
	return n_conns < max_conns;
}

static void update(struct conn *c)
{
	if (c->dead)
		return;
	uint32_t ma = 0, mb = 0;
	if (c->state == ST_HANDSHAKE) {
		ma = EPOLLIN;
	} else if (c->state == ST_REQUEST || c->state == ST_CLOSING) {
		ma = (c->state == ST_REQUEST ? EPOLLIN : 0) | (c->ba.len ? EPOLLOUT : 0);
	} else {
		if (!c->a.eof && c->ab.len < RELAY_BUF)
			ma |= EPOLLIN;
		if (c->ba.len)
			ma |= EPOLLOUT;
		if (c->state == ST_RELAY) {
			if (!c->b.eof && c->ba.len < RELAY_BUF)
				mb |= EPOLLIN;
			if (c->ab.len)
				mb |= EPOLLOUT;
		} else if (c->state == ST_CONNECTING) {
			mb = EPOLLOUT;
		}
	}
	set_mask(&c->a, ma);
	set_mask(&c->b, mb);
}

bool buf_ready(struct buf *b)
{
	if (!b->data && !(b->data = malloc(RELAY_BUF))) {
		ilog("out of memory for a relay buffer");
		return false;
	}
	return true;
}

/* Appends to a ready buffer (short lines: they always fit where they are used). */
void buf_put(struct buf *b, const char *data, size_t len)
{
	for (size_t i = 0; i < len && b->len < RELAY_BUF; i++, b->len++)
		b->data[(b->head + b->len) % RELAY_BUF] = data[i];
}

/* One readv into the free space. false: the connection failed and is closed. */
static bool pump_in(struct conn *c, struct endpoint *from, struct buf *b, uint32_t ev)
{
	if (from->eof || b->len == RELAY_BUF)
		return true;
	if (!buf_ready(b)) {
		conn_close(c);
		return false;
	}
	uint32_t tail = (b->head + b->len) % RELAY_BUF, space = RELAY_BUF - b->len;
	uint32_t first = RELAY_BUF - tail < space ? RELAY_BUF - tail : space;
	struct iovec iov[2] = { { b->data + tail, first }, { b->data, space - first } };
	ssize_t n = readv(from->fd, iov, space > first ? 2 : 1);
	if (n > 0)
		b->len += (uint32_t)n;
	else if (n == 0) {
		from->eof = true;
		from->hup = ev & EPOLLHUP;
	}
	else if (errno != EAGAIN && errno != EINTR) {
		conn_close(c);
		return false;
	}
	return true;
}

/* One writev of what is buffered. false: the connection failed and is closed. */
static bool pump_out(struct conn *c, struct endpoint *to, struct buf *b)
{
	if (!b->len || to->fd < 0)
		return true;
	uint32_t first = RELAY_BUF - b->head < b->len ? RELAY_BUF - b->head : b->len;
	struct iovec iov[2] = { { b->data + b->head, first }, { b->data, b->len - first } };
	ssize_t n = writev(to->fd, iov, b->len > first ? 2 : 1);
	if (n > 0) {
		b->head = (b->head + (uint32_t)n) % RELAY_BUF;
		b->len -= (uint32_t)n;
		if (!b->len)
			b->head = 0;
	} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
		conn_close(c);
		return false;
	}
	return true;
}

/*
 * Pass EOF on once its data is through; close when both directions are
 * done. A side that closed outright (not a half-close) can take nothing
 * more either: close both at once, so the other peer learns of it even where
 * a half-close does not carry (Firecracker's host side sees no shutdown(WR)).
 */
static void propagate_eof(struct conn *c)
{
	if (c->dead || c->state != ST_RELAY)
		return;
	if ((c->a.eof && c->a.hup && !c->ab.len) || (c->b.eof && c->b.hup && !c->ba.len)) {
		conn_close(c);
		return;
	}
	if (c->a.eof && !c->ab.len && !c->b.shut) {
		shutdown(c->b.fd, SHUT_WR);
		c->b.shut = true;
	}
	if (c->b.eof && !c->ba.len && !c->a.shut) {
		shutdown(c->a.fd, SHUT_WR);
		c->a.shut = true;
	}
	if (c->a.shut && c->b.shut)
		conn_close(c);
}

void relay_ready(struct conn *c)
{
	set_state(c, ST_RELAY);
	if (pump_out(c, &c->b, &c->ab))
		propagate_eof(c);
}

static void upstream_failed(struct conn *c, int err)
{
	close_endpoint(&c->b);
	int64_t now = now_ms();
	if (now >= c->deadline) {
		static int64_t last_log = -1;
		static unsigned quiet;
		if (last_log < 0 || now - last_log >= 1000) {
			ilog("envd did not accept on %s within %d s (%s): closing the connection%s", cfg.envd_socket,
			     UPSTREAM_WAIT_MS / 1000, strerror(err), quiet ? " (and others since the last report)" : "");
			last_log = now;
			quiet = 0;
		} else {
			quiet++;
		}
		conn_close(c);
		return;
	}
	set_state(c, ST_PENDING);
	c->retry_at = now + c->retry_ms;
	c->retry_ms = c->retry_ms * 2 > 200 ? 200 : c->retry_ms * 2;
}

static void connect_upstream(struct conn *c)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", cfg.envd_socket);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		upstream_failed(c, errno);
		return;
	}
	c->b.fd = fd;
	if (connect(fd, (struct sockaddr *)&sun, sizeof sun) == 0)
		relay_ready(c);
	else if (errno == EINPROGRESS)
		set_state(c, ST_CONNECTING);
	else
		upstream_failed(c, errno); /* ENOENT / ECONNREFUSED while envd starts; EAGAIN: backlog full */
}

static void handshake(struct conn *c)
{
	ssize_t n = read(c->a.fd, c->hs + c->hslen, HANDSHAKE_MAX - c->hslen);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(c);
		return;
	}
	c->hslen += (uint32_t)n;
	char *nl = memchr(c->hs, '\n', c->hslen);
	if (!nl) {
		if (c->hslen >= HANDSHAKE_MAX)
			conn_close(c);
		return;
	}
	unsigned port = handshake_port(c->hs, (size_t)(nl - c->hs));
	if (!port || !buf_ready(&c->ab) || !buf_ready(&c->ba)) {
		conn_close(c); /* as Firecracker does for a port nothing listens on */
		return;
	}
	char ok[32];
	int okn = snprintf(ok, sizeof ok, "OK %u\n", port);
	buf_put(&c->ba, ok, (size_t)okn);
	/* Bytes after the line are the stream's first bytes (the forwarder's request, for 49982). */
	uint32_t rest = c->hslen - (uint32_t)(nl + 1 - c->hs);
	if (port == FORWARD_PORT) {
		memmove(c->hs, nl + 1, rest);
		c->hslen = rest;
		forward_start(c);
		return;
	}
	buf_put(&c->ab, nl + 1, rest);
	set_state(c, ST_PENDING);
	c->deadline = now_ms() + UPSTREAM_WAIT_MS;
	connect_upstream(c);
}

static void conn_event(struct endpoint *ep, uint32_t ev)
{
	struct conn *c = ep->c;
	if (c->dead || ep->fd < 0)
		return;
	bool in = ev & (EPOLLIN | EPOLLHUP | EPOLLERR) && ep->mask & EPOLLIN;
	bool out = ev & (EPOLLOUT | EPOLLHUP | EPOLLERR) && ep->mask & EPOLLOUT;
	if (ep == &c->a) {
		if (c->state == ST_HANDSHAKE) {
			handshake(c);
		} else if (c->state == ST_REQUEST || c->state == ST_CLOSING) {
			if (out && pump_out(c, &c->a, &c->ba) && c->state == ST_CLOSING && !c->ba.len)
				conn_close(c); /* the answer is out */
			if (in && !c->dead)
				forward_request(c);
		} else {
			if (in && pump_in(c, &c->a, &c->ab, ev) && c->state == ST_RELAY)
				pump_out(c, &c->b, &c->ab);
			if (out && !c->dead)
				pump_out(c, &c->a, &c->ba);
		}
	} else if (c->state == ST_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof err;
		getsockopt(ep->fd, SOL_SOCKET, SO_ERROR, &err, &len);
		if (c->fwd_port)
			forward_connected(c, err);
		else if (err)
			upstream_failed(c, err);
		else
			relay_ready(c);
	} else {
		if (in && pump_in(c, &c->b, &c->ba, ev))
			pump_out(c, &c->a, &c->ba);
		if (out && !c->dead)
			pump_out(c, &c->b, &c->ab);
	}
	propagate_eof(c);
	update(c);
}

/* A connection accepted by a listener (non-blocking, close-on-exec). */
void bridge_accepted(int fd, unsigned port)
{
	struct conn *c = calloc(1, sizeof *c);
	if (!c) {
		close(fd);
		return;
	}
	c->a = (struct endpoint){ .tag = { EP_CONN }, .fd = fd, .c = c };
	c->b = (struct endpoint){ .tag = { EP_CONN }, .fd = -1, .c = c };
	c->retry_ms = 10;
	n_conns++;
	c->state = !port ? ST_HANDSHAKE : port == FORWARD_PORT ? ST_REQUEST : ST_PENDING;
	list_add(&waiting, c);
	if (c->state == ST_HANDSHAKE) {
		c->deadline = now_ms() + HANDSHAKE_TIMEOUT_MS;
	} else if (c->state == ST_REQUEST) {
		if (buf_ready(&c->ab) && buf_ready(&c->ba))
			forward_start(c);
		else
			conn_close(c);
	} else {
		c->deadline = now_ms() + UPSTREAM_WAIT_MS;
		connect_upstream(c);
	}
	update(c);
}

void bridge_event(struct ep_tag *tag, uint32_t events)
{
	if (tag->kind == EP_LISTENER)
		listener_event(tag);
	else
		conn_event((struct endpoint *)tag, events);
}

int64_t bridge_deadline(void)
{
	int64_t dl = listener_deadline();
	for (struct conn *c = waiting; c; c = c->next) {
		int64_t t = c->state == ST_PENDING ? c->retry_at : c->deadline;
		if (dl < 0 || t < dl)
			dl = t;
	}
	return dl;
}

void bridge_tick(int64_t now)
{
	while (dead) {
		struct conn *c = dead;
		list_del(&dead, c);
		free(c->ab.data);
		free(c->ba.data);
		free(c);
	}
	if (shutting_down)
		return;
	listener_tick(now);
	struct conn *next;
	for (struct conn *c = waiting; c; c = next) {
		next = c->next;
		if (c->state == ST_PENDING && now >= c->retry_at)
			connect_upstream(c);
		else if (c->state == ST_CONNECTING && c->fwd_port && now >= c->deadline)
			forward_timeout(c);
		else if (c->state != ST_PENDING && now >= c->deadline)
			conn_close(c); /* a handshake or request that never came, a connect that never finished */
		if (!c->dead)
			update(c);
	}
}

void bridge_close_all(void)
{
	listener_close();
	if (n_conns)
		ilog("closing %u connections", n_conns);
	while (waiting)
		conn_close(waiting);
	while (active)
		conn_close(active);
}
