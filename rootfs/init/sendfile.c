/*
 * `locale2b-init --sendfile OFFSET COUNT`: copies COUNT bytes of the file on
 * its stdin, from OFFSET, to the socket on its stdout with sendfile(2), so
 * they never pass through user space. envd starts it for a large GET /files
 * once the response's headers are out (envd/http/file-sendfile.ts): Node
 * cannot call sendfile, and reading into buffers and writing them again cost
 * envd two copies and twice the CPU of E2B's Go envd (which sends files so).
 *
 * The socket is envd's, shared: non-blocking, so a full socket buffer is
 * waited out with poll(). Exit status:
 *   0 every byte sent
 *   2 the client went away (EPIPE, ECONNRESET)
 *   3 the file ended before OFFSET + COUNT (it shrank)
 *   4 sendfile cannot be used on these descriptors, nothing was sent (envd copies instead)
 *   5 another error (it is printed on stderr)
 *   64 bad usage
 */
#include "init.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>

/* A decimal count or offset of a command line (`--sendfile`, `--receive`): digits only, no sign. */
bool parse_u64(const char *s, unsigned long long *out)
{
	char *end;
	errno = 0;
	if (!s || !*s || *s == '-')
		return false;
	*out = strtoull(s, &end, 10);
	return errno == 0 && *end == '\0';
}

/* Waits until the non-blocking `fd` (a socket shared with envd) is ready for `events`: 0, or -1 with errno. */
int wait_ready(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };
	return poll(&p, 1, -1) < 0 && errno != EINTR ? -1 : 0;
}

int sendfile_main(int argc, char **argv)
{
	unsigned long long offset, count;
	if (argc != 4 || !parse_u64(argv[2], &offset) || !parse_u64(argv[3], &count) || offset > (unsigned long long)INT64_MAX) {
		fprintf(stderr, "usage: locale2b-init --sendfile OFFSET COUNT (file on stdin, socket on stdout)\n");
		return 64;
	}
	signal(SIGPIPE, SIG_IGN);
	off_t off = (off_t)offset;
	bool sent = false;
	while (count > 0) {
		size_t chunk = count > (1ULL << 30) ? (size_t)1 << 30 : (size_t)count;
		ssize_t n = sendfile(1, 0, &off, chunk);
		if (n > 0) {
			count -= (unsigned long long)n;
			sent = true;
			continue;
		}
		if (n == 0)
			return 3;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) {
			if (wait_ready(1, POLLOUT) < 0) {
				fprintf(stderr, "locale2b-init --sendfile: poll: %s\n", strerror(errno));
				return 5;
			}
			continue;
		}
		if (errno == EPIPE || errno == ECONNRESET)
			return 2;
		if (!sent && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP))
			return 4;
		fprintf(stderr, "locale2b-init --sendfile: %s\n", strerror(errno));
		return 5;
	}
	return 0;
}
