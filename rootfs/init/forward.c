/*
 * The user-port forwarder (vsock port 49982, or `CONNECT 49982` in process
 * mode with --forward-ports): the host sends `TCP <port>\n`; the init connects
 * to 127.0.0.1:<port> without blocking and answers `OK\n`, after which the
 * connection is relayed like envd's (bridge.c), or `ERR <why>\n` and closes.
 * No retries: a port nothing listens on is an answer, not something to wait for.
 */
#include "init.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* `TCP <port>` (the newline cut off, a trailing CR allowed): the port (1..65535), else 0. */
static unsigned request_port(const char *line, size_t len)
{
	if (len && line[len - 1] == '\r')
		len--;
	if (len < 5 || len > 4 + 5 || memcmp(line, "TCP ", 4) != 0)
		return 0;
	unsigned port = 0;
	for (size_t i = 4; i < len; i++) {
		if (line[i] < '0' || line[i] > '9')
			return 0;
		port = port * 10 + (unsigned)(line[i] - '0');
	}
	return port <= 65535 ? port : 0;
}

/* Answers the host with one line (the newline added), then closes once it is written. */
void conn_fail(struct conn *c, const char *fmt, ...)
{
	char line[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if (n > (int)sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	close_endpoint(&c->b);
	set_state(c, ST_CLOSING);
	c->deadline = now_ms() + HANDSHAKE_TIMEOUT_MS;
	buf_put(&c->ba, line, (size_t)n);
}

void forward_connected(struct conn *c, int err)
{
	if (err) {
		char why[96];
		snprintf(why, sizeof why, "%s", strerror(err));
		why[0] = (char)tolower((unsigned char)why[0]); /* "connection refused" */
		conn_fail(c, "ERR %u: %s", c->fwd_port, why);
		return;
	}
	buf_put(&c->ba, "OK\n", 3);
	relay_ready(c);
}

void forward_timeout(struct conn *c)
{
	conn_fail(c, "ERR %u: timed out", c->fwd_port);
}

static void connect_port(struct conn *c)
{
	set_state(c, ST_CONNECTING);
	c->deadline = now_ms() + FORWARD_CONNECT_TIMEOUT_MS;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		forward_connected(c, errno);
		return;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* a relay: the sender already chose its writes */
	c->b.fd = fd;
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)c->fwd_port) };
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sin, sizeof sin) == 0)
		forward_connected(c, 0);
	else if (errno != EINPROGRESS)
		forward_connected(c, errno);
}

/* Acts on the request line once it is complete in c->hs. */
static void try_request(struct conn *c)
{
	uint32_t lim = c->hslen < FORWARD_LINE_MAX ? c->hslen : FORWARD_LINE_MAX;
	char *nl = memchr(c->hs, '\n', lim);
	if (!nl) {
		if (c->hslen >= FORWARD_LINE_MAX)
			conn_fail(c, "ERR bad request");
		return;
	}
	unsigned port = request_port(c->hs, (size_t)(nl - c->hs));
	if (!port) {
		conn_fail(c, "ERR bad request");
		return;
	}
	/* Bytes after the line are the stream's first bytes: kept until the connect is through. */
	buf_put(&c->ab, nl + 1, c->hslen - (uint32_t)(nl + 1 - c->hs));
	c->hslen = 0;
	c->fwd_port = port;
	connect_port(c);
}

/* A forwarder connection (buffers ready), with c->hslen bytes of its request already in c->hs. */
void forward_start(struct conn *c)
{
	set_state(c, ST_REQUEST);
	c->deadline = now_ms() + HANDSHAKE_TIMEOUT_MS;
	try_request(c);
}

/* The host's side is readable while the request line is incomplete. */
void forward_request(struct conn *c)
{
	ssize_t n = read(c->a.fd, c->hs + c->hslen, HANDSHAKE_MAX - c->hslen);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(c); /* gone before asking for a port */
		return;
	}
	c->hslen += (uint32_t)n;
	try_request(c);
}
