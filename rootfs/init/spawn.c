/*
 * `locale2b-init --spawn-helper`: starts envd's processes for it.
 *
 * Node's child_process forks the whole envd (tens of MiB of page tables, then
 * a copy-on-write fault for each page envd writes afterwards): about half of
 * envd's CPU per command. This helper is small and single-threaded and
 * starts each process with clone(CLONE_VM | CLONE_VFORK), as Go and
 * posix_spawn do: no page tables copied, whatever envd's size.
 *
 * envd talks to it over its stdin (requests) and stdout (answers and exit
 * events), little-endian frames `u32 length, u8 type, body`:
 *   SPAWN  (1) u32 id, i32 uid, i32 gid, u32 flags, u32 argc, u32 envc, then
 *              NUL-terminated strings: file, cwd, argv[argc], envp[envc]
 *          -> SPAWNED (1) u32 id, i32 pid or -errno, i32 stdout, i32 stderr, i32 stdin
 *              (the helper's ends of the child's pipes: envd opens them through
 *              /proc/<helper>/fd/<n>, then sends CLOSE; -1 when there is none)
 *   CLOSE  (2) u32 id: envd holds its own ends now, the helper closes its copies
 *              (a spawn that changes uid waits for every earlier CLOSE: see run_queue)
 *   EXIT   (3) i32 pid, i32 wait status: a child ended (the helper reaps them all)
 *   PING   (4) u32 id -> PONG (4) u32 id, i32 fd: a pipe's read end, for envd to
 *              check that it can open the helper's fds before trusting it
 * Flags: 1 a stdin pipe (else /dev/null), 2 setsid, 4 oom_score_adj 500.
 * The file is searched on the PATH of envp when it has no '/', as execvp
 * would. EOF on stdin: the helper exits (its children run on).
 */
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_FRAME (4 * 1024 * 1024)
#define MAX_STRINGS 65536
#define CHILD_STACK (64 * 1024)
#define MAX_PENDING 4096
#define OOM_SCORE_CHILD "500"

enum { T_SPAWN = 1, T_CLOSE = 2, T_EXIT = 3, T_PING = 4 };
enum { F_STDIN = 1, F_SETSID = 2, F_OOM = 4 };

struct pending {
	uint32_t id;
	int fds[3];
};

static struct pending pending[MAX_PENDING];
static int n_pending;
static int devnull = -1;
/*
 * LOCALE2B_OUTPUT_PIPE_SIZE (bytes; the gvisor runtime sets it): the size of
 * each child's stdout and stderr pipe (F_SETPIPE_SZ), so a writer of small
 * chunks runs on while envd, waking less often, reads many at once
 * (LOCALE2B_OUTPUT_COALESCE_MS, pooled-pipe.ts). 0: the kernel's default.
 */
static int output_pipe_size;

struct child_args {
	const char *file;
	const char *cwd;
	char **argv;
	char **envp;
	const char *path; /* PATH from envp, for a file without '/' */
	int uid, gid;
	uint32_t flags;
	int fd[3]; /* the child's 0, 1, 2 */
	volatile int err;
};

static void write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(0); /* envd is gone */
		p += w;
		len -= (size_t)w;
	}
}

static void send_frame(uint8_t type, const int32_t *words, int n)
{
	unsigned char buf[5 + 4 * 8];
	uint32_t len = 1 + 4 * (uint32_t)n;
	memcpy(buf, &len, 4);
	buf[4] = type;
	memcpy(buf + 5, words, 4 * (size_t)n);
	write_all(1, buf, 4 + len);
}

/* Runs in the clone()d child, sharing the helper's memory until execve: syscalls only. */
static int child_main(void *arg)
{
	struct child_args *a = arg;
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			signal(s, SIG_DFL);
	if ((a->flags & F_SETSID) && setsid() < 0)
		goto fail;
	/* Before the uid changes: then /proc/self is no longer the child's to write. */
	if (a->flags & F_OOM) {
		int o = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
		if (o >= 0) {
			if (write(o, OOM_SCORE_CHILD, sizeof OOM_SCORE_CHILD - 1) < 0) {
				/* best effort, as envd's own raise around Node's fork */
			}
			close(o);
		}
	}
	if (a->gid >= 0 && (setgroups(0, NULL) < 0 || setgid((gid_t)a->gid) < 0))
		goto fail;
	if (a->uid >= 0 && setuid((uid_t)a->uid) < 0)
		goto fail;
	if (a->cwd[0] && chdir(a->cwd) < 0)
		goto fail;
	/* Above 2 first: a pipe may itself be fd 0-2 of the helper (it never is: 0-2 are open), then in place. */
	int tmp[3];
	for (int i = 0; i < 3; i++)
		if ((tmp[i] = fcntl(a->fd[i], F_DUPFD_CLOEXEC, 3)) < 0)
			goto fail;
	for (int i = 0; i < 3; i++)
		if (dup2(tmp[i], i) < 0)
			goto fail;
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (strchr(a->file, '/')) {
		execve(a->file, a->argv, a->envp);
		goto fail;
	}
	/* execvp's search, on the child's own PATH. */
	char full[4096];
	int eacces = 0;
	const char *p = a->path ? a->path : DEFAULT_PATH;
	size_t flen = strlen(a->file);
	for (;;) {
		const char *end = strchr(p, ':');
		size_t dlen = end ? (size_t)(end - p) : strlen(p);
		if (dlen == 0) {
			full[0] = '.';
			dlen = 1;
		} else if (dlen < sizeof full) {
			memcpy(full, p, dlen);
		}
		if (dlen + 1 + flen + 1 <= sizeof full) {
			full[dlen] = '/';
			memcpy(full + dlen + 1, a->file, flen + 1);
			execve(full, a->argv, a->envp);
			if (errno == EACCES)
				eacces = 1;
			else if (errno != ENOENT && errno != ENOTDIR && errno != ENAMETOOLONG)
				goto fail;
		}
		if (!end)
			break;
		p = end + 1;
	}
	errno = eacces ? EACCES : ENOENT;
fail:
	a->err = errno ? errno : EINVAL;
	_exit(127);
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

static void do_spawn(const unsigned char *body, uint32_t len)
{
	int32_t out[5] = { 0, -EINVAL, -1, -1, -1 };
	if (len < 24)
		goto answer;
	uint32_t id, flags, argc, envc;
	int32_t uid, gid;
	memcpy(&id, body, 4);
	memcpy(&uid, body + 4, 4);
	memcpy(&gid, body + 8, 4);
	memcpy(&flags, body + 12, 4);
	memcpy(&argc, body + 16, 4);
	memcpy(&envc, body + 20, 4);
	out[0] = (int32_t)id;
	if (argc > MAX_STRINGS || envc > MAX_STRINGS || n_pending >= MAX_PENDING)
		goto answer;
	uint32_t total = 2 + argc + envc;
	char **strs = calloc(total + 2, sizeof(char *));
	if (!strs) {
		out[1] = -ENOMEM;
		goto answer;
	}
	const char *p = (const char *)body + 24, *end = (const char *)body + len;
	for (uint32_t i = 0; i < total; i++) {
		const char *nul = memchr(p, '\0', (size_t)(end - p));
		if (!nul) {
			free(strs);
			goto answer;
		}
		strs[i] = (char *)p;
		p = nul + 1;
	}
	/* strs: file, cwd, argv..., NULL, envp..., NULL */
	char **argv = calloc(argc + 1, sizeof(char *));
	char **envp = calloc(envc + 1, sizeof(char *));
	if (!argv || !envp) {
		free(argv);
		free(envp);
		free(strs);
		out[1] = -ENOMEM;
		goto answer;
	}
	memcpy(argv, strs + 2, argc * sizeof(char *));
	memcpy(envp, strs + 2 + argc, envc * sizeof(char *));
	struct child_args a = { .file = strs[0], .cwd = strs[1], .argv = argv, .envp = envp, .uid = uid, .gid = gid, .flags = flags };
	for (uint32_t i = 0; i < envc; i++)
		if (!strncmp(envp[i], "PATH=", 5))
			a.path = envp[i] + 5;
	int o[2] = { -1, -1 }, e[2] = { -1, -1 }, in[2] = { -1, -1 };
	if (pipe2(o, O_CLOEXEC) < 0 || pipe2(e, O_CLOEXEC) < 0 || ((flags & F_STDIN) && pipe2(in, O_CLOEXEC) < 0)) {
		out[1] = -errno;
		int all[] = { o[0], o[1], e[0], e[1], in[0], in[1] };
		close_fds(all, 6);
		goto done;
	}
	if (output_pipe_size > 0) {
		/* Best effort: a kernel that refuses (a per-user limit) keeps its default size. */
		(void)fcntl(o[1], F_SETPIPE_SZ, output_pipe_size);
		(void)fcntl(e[1], F_SETPIPE_SZ, output_pipe_size);
	}
	a.fd[0] = (flags & F_STDIN) ? in[0] : devnull;
	a.fd[1] = o[1];
	a.fd[2] = e[1];
	void *stack = mmap(NULL, CHILD_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	pid_t pid = -1;
	if (stack != MAP_FAILED) {
		pid = clone(child_main, (char *)stack + CHILD_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
		int saved = errno;
		munmap(stack, CHILD_STACK);
		errno = saved;
	}
	/*
	 * A child that changed its uid did so on this process's memory (CLONE_VM):
	 * the kernel made it non-dumpable, and envd could no longer open its fds
	 * through /proc. It is envd's own helper: dumpable again, as envd is.
	 */
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	/* The child's ends belong to the child now (or to nobody). */
	int theirs[] = { o[1], e[1], in[0] };
	close_fds(theirs, 3);
	if (pid < 0 || a.err) {
		out[1] = pid < 0 ? -errno : -a.err;
		int ours[] = { o[0], e[0], in[1] };
		close_fds(ours, 3);
		/* A child that failed to exec exited 127: its exit is reaped and dropped. */
		if (pid > 0)
			waitpid(pid, NULL, 0);
		goto done;
	}
	out[1] = pid;
	out[2] = o[0];
	out[3] = e[0];
	out[4] = in[1];
	pending[n_pending++] = (struct pending){ .id = id, .fds = { o[0], e[0], in[1] } };
done:
	free(argv);
	free(envp);
	free(strs);
answer:
	send_frame(T_SPAWN, out, 5);
}

/*
 * SPAWN requests wait here when they must: a child that changes its uid does
 * so on the helper's memory, and for that instant the kernel makes the
 * helper non-dumpable, when /proc/<helper>/fd refuses envd. So a
 * uid-changing spawn starts only once envd has opened (and CLOSEd) the pipes
 * of every process started before it; others start at once.
 */
struct queued {
	unsigned char *body;
	uint32_t len;
	struct queued *next;
};

static struct queued *queue_head, *queue_tail;

static void enqueue(const unsigned char *body, uint32_t len)
{
	struct queued *q = malloc(sizeof *q);
	unsigned char *copy = malloc(len ? len : 1);
	if (!q || !copy) {
		free(q);
		free(copy);
		do_spawn(body, len); /* answers ENOMEM or spawns; never silently drops a request */
		return;
	}
	memcpy(copy, body, len);
	*q = (struct queued){ .body = copy, .len = len };
	if (queue_tail)
		queue_tail->next = q;
	else
		queue_head = q;
	queue_tail = q;
}

static bool changes_uid(const struct queued *q)
{
	if (q->len < 12)
		return false;
	int32_t uid, gid;
	memcpy(&uid, q->body + 4, 4);
	memcpy(&gid, q->body + 8, 4);
	return (uid >= 0 && (uid_t)uid != geteuid()) || (gid >= 0 && (gid_t)gid != getegid());
}

static void run_queue(void)
{
	while (queue_head && !(n_pending > 0 && changes_uid(queue_head))) {
		struct queued *q = queue_head;
		queue_head = q->next;
		if (!queue_head)
			queue_tail = NULL;
		do_spawn(q->body, q->len);
		free(q->body);
		free(q);
	}
}

static void do_close(uint32_t id)
{
	for (int i = 0; i < n_pending; i++) {
		if (pending[i].id != id)
			continue;
		close_fds(pending[i].fds, 3);
		pending[i] = pending[--n_pending];
		return;
	}
}

static void reap(void)
{
	for (;;) {
		int status;
		pid_t p = waitpid(-1, &status, WNOHANG);
		if (p <= 0)
			return;
		int32_t w[2] = { p, status };
		send_frame(T_EXIT, w, 2);
	}
}

static void do_ping(uint32_t id)
{
	static int probe[2] = { -1, -1 };
	if (probe[0] < 0 && pipe2(probe, O_CLOEXEC) < 0)
		probe[0] = -1;
	int32_t w[2] = { (int32_t)id, probe[0] };
	send_frame(T_PING, w, 2);
}

/* Nothing envd's parent left open (without close-on-exec) may reach the processes it starts. */
static void close_inherited(void)
{
	if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0)
		return;
	for (int fd = 3; fd < 1024; fd++)
		close(fd);
}

int spawn_helper_main(void)
{
	close_inherited();
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	const char *pipe_size = getenv("LOCALE2B_OUTPUT_PIPE_SIZE");
	if (pipe_size)
		output_pipe_size = atoi(pipe_size);
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	signal(SIGPIPE, SIG_IGN);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (devnull < 0 || sfd < 0) {
		fprintf(stderr, "locale2b-init --spawn-helper: %s\n", strerror(errno));
		return 1;
	}
	unsigned char *buf = malloc(MAX_FRAME + 4);
	size_t have = 0;
	if (!buf)
		return 1;
	for (;;) {
		struct pollfd pf[2] = { { .fd = 0, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (pf[1].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) > 0) {
			}
			reap();
		}
		if (!pf[0].revents)
			continue;
		ssize_t r = read(0, buf + have, MAX_FRAME + 4 - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return 0; /* envd closed its end */
		have += (size_t)r;
		for (;;) {
			uint32_t len;
			if (have < 4)
				break;
			memcpy(&len, buf, 4);
			if (len == 0 || len > MAX_FRAME)
				return 2; /* not envd speaking */
			if (have < 4 + len)
				break;
			uint8_t type = buf[4];
			uint32_t id = 0;
			if (len >= 5)
				memcpy(&id, buf + 5, 4);
			if (type == T_SPAWN)
				enqueue(buf + 5, len - 1);
			else if (type == T_CLOSE)
				do_close(id);
			else if (type == T_PING)
				do_ping(id);
			memmove(buf, buf + 4 + len, have - 4 - len);
			have -= 4 + len;
		}
		run_queue();
		reap();
	}
}
