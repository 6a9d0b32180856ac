/*
 * `locale2b-init --receive COUNT`: moves the next COUNT bytes of the socket
 * on its stdin into the file on its stdout with splice(2) (socket -> pipe ->
 * file), so they never pass through user space. envd starts it for a large
 * POST /files once it has stopped reading the connection itself
 * (envd/http/file-splice.ts): Node cannot splice, and reading the body into
 * buffers and writing them again cost envd about twice the CPU of E2B's Go
 * envd. Where splice is refused (a socket or file that does not support
 * it) the bytes are copied through one buffer instead.
 *
 * The socket is envd's, shared: non-blocking, so an empty socket is waited
 * out with poll(). A failed write does not stop the reading: the rest of the
 * body is read and dropped, so envd can still answer on the connection.
 * Exit status:
 *   0 every byte written
 *   2 the client went away before COUNT bytes (end of stream, ECONNRESET)
 *   3 a write failed (stderr: `write errno <n>: <message>`), the rest was read
 *   5 another error (it is printed on stderr)
 *   64 bad usage
 */
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CHUNK (1024 * 1024)

static char buf[CHUNK];
static int write_errno;

/* Writes `n` bytes of buf to the file; after a failure, drops them (write_errno keeps the first error). */
static void write_buf(size_t n)
{
	for (size_t done = 0; done < n && !write_errno;) {
		ssize_t w = write(1, buf + done, n - done);
		if (w > 0)
			done += (size_t)w;
		else if (w < 0 && errno == EINTR)
			continue;
		else
			write_errno = w < 0 ? errno : EIO;
	}
}

/* Moves the `n` bytes in the pipe to the file; `*splicing` is cleared when the file refuses splice. */
static void drain_pipe(int pipe_r, size_t n, bool *splicing)
{
	while (n > 0) {
		ssize_t m = -1;
		if (*splicing && !write_errno) {
			m = splice(pipe_r, NULL, 1, NULL, n, SPLICE_F_MOVE);
			if (m > 0) {
				n -= (size_t)m;
				continue;
			}
			if (m < 0 && errno == EINTR)
				continue;
			if (m < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP))
				*splicing = false; /* the file takes no splice: copy from now on */
			else
				write_errno = m < 0 ? errno : EIO;
		}
		/* Copy (or drop, after a failed write) what the pipe holds. */
		ssize_t r = read(pipe_r, buf, n < CHUNK ? n : CHUNK);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			write_errno = write_errno ? write_errno : EIO;
			return;
		}
		write_buf((size_t)r);
		n -= (size_t)r;
	}
}

int receive_main(int argc, char **argv)
{
	unsigned long long count;
	if (argc != 3 || !parse_u64(argv[2], &count)) {
		fprintf(stderr, "usage: locale2b-init --receive COUNT (socket on stdin, file on stdout)\n");
		return 64;
	}
	signal(SIGPIPE, SIG_IGN);
	int p[2];
	bool splicing = pipe2(p, O_CLOEXEC) == 0;
	if (splicing)
		(void)fcntl(p[1], F_SETPIPE_SZ, CHUNK); /* fewer, larger moves; the default 64 KiB works too */
	while (count > 0) {
		size_t want = count > CHUNK ? CHUNK : (size_t)count;
		ssize_t n;
		if (splicing) {
			n = splice(0, NULL, p[1], NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
				splicing = false; /* the socket takes no splice; nothing was taken */
				continue;
			}
		} else {
			n = read(0, buf, want);
		}
		if (n == 0)
			return 2;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				if (wait_ready(0, POLLIN) < 0) {
					fprintf(stderr, "locale2b-init --receive: poll: %s\n", strerror(errno));
					return 5;
				}
				continue;
			}
			if (errno == ECONNRESET || errno == EPIPE || errno == ETIMEDOUT)
				return 2;
			fprintf(stderr, "locale2b-init --receive: read: %s\n", strerror(errno));
			return 5;
		}
		count -= (unsigned long long)n;
		if (splicing)
			drain_pipe(p[0], (size_t)n, &splicing);
		else if (!write_errno)
			write_buf((size_t)n);
	}
	if (write_errno) {
		fprintf(stderr, "write errno %d: %s\n", write_errno, strerror(write_errno));
		return 3;
	}
	return 0;
}
