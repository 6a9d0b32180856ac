/*
 * l2b-idmap-bind: binds a volume's host mount at a new place with its ids
 * shifted back to the sandbox's own (an id-mapped mount), for gVisor.
 *
 *   l2b-idmap-bind --shift BASE:COUNT SOURCE TARGET [SOURCE TARGET ...] [-- PROGRAM ARGS...]
 *
 * With `-- PROGRAM`, the binds are made in a new, private mount namespace
 * and PROGRAM runs in it (qemu's virtiofsd): the host's own mount table never
 * has them, and they go when PROGRAM exits.
 *
 * A volume's files belong to the ids the process runtime gives sandboxes
 * (`user` is host uid BASE + 1000), while runsc's gofer works with host ids
 * unshifted (`user` of a gVisor sandbox is host uid 1000). Each SOURCE is
 * cloned (open_tree OPEN_TREE_CLONE, symlinks not followed), the clone gets
 * MOUNT_ATTR_IDMAP with a user namespace whose ids BASE..BASE+COUNT-1 are
 * host ids 0..COUNT-1 (so on-disk BASE + 1000 reads as 1000 and a write by
 * 1000 is stored as BASE + 1000; ids outside the range read as the overflow
 * id and cannot be written), plus nodev, nosuid and noatime (locked: the
 * mount belongs to the host's user namespace), then is moved onto TARGET
 * (an existing, empty directory of the host; never through a symlink).
 * Runs as real root on the host; needs Linux >= 5.12 and a file system that
 * supports id-mapped mounts (ext4 does).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_MOUNTS 64

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("l2b-idmap-bind: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		die("open %s: %s", path, strerror(errno));
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		die("write %s: %s", path, strerror(errno));
	close(fd);
}

/* A user namespace mapping BASE.. to host 0.. (held by a child that only waits; its fd outlives it). */
static int shift_userns(unsigned long base, unsigned long count)
{
	int sync[2];
	if (pipe2(sync, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	pid_t child = fork();
	if (child < 0)
		die("fork: %s", strerror(errno));
	if (child == 0) {
		char c;
		close(sync[1]);
		if (unshare(CLONE_NEWUSER) < 0)
			_exit(1);
		/* Wait to be killed (the parent keeps the namespace by its fd). */
		if (read(sync[0], &c, 1) < 0)
			_exit(1);
		_exit(0);
	}
	close(sync[0]);
	char path[64], map[96];
	int ns = -1;
	/* Poll until the child is in its own namespace. */
	for (int tries = 0; tries < 1000 && ns < 0; tries++) {
		snprintf(path, sizeof path, "/proc/%d/ns/user", (int)child);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		int self = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
		struct stat a, b;
		if (fd >= 0 && self >= 0 && fstat(fd, &a) == 0 && fstat(self, &b) == 0 && a.st_ino != b.st_ino)
			ns = fd;
		else if (fd >= 0)
			close(fd);
		if (self >= 0)
			close(self);
		if (ns < 0)
			usleep(1000);
	}
	if (ns < 0)
		die("cannot make a user namespace");
	snprintf(map, sizeof map, "%lu 0 %lu\n", base, count);
	snprintf(path, sizeof path, "/proc/%d/uid_map", (int)child);
	write_file(path, map);
	snprintf(path, sizeof path, "/proc/%d/gid_map", (int)child);
	write_file(path, map);
	close(sync[1]);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return ns;
}

int main(int argc, char **argv)
{
	unsigned long base = 0, count = 0;
	int i = 1;
	if (i + 1 < argc && strcmp(argv[i], "--shift") == 0) {
		if (sscanf(argv[i + 1], "%lu:%lu", &base, &count) != 2 || count == 0)
			die("--shift %s: expected BASE:COUNT", argv[i + 1]);
		i += 2;
	}
	int end = argc;
	for (int k = i; k < argc; k++) {
		if (strcmp(argv[k], "--") == 0) {
			end = k;
			break;
		}
	}
	char **program = end < argc && end + 1 < argc ? &argv[end + 1] : NULL;
	if (end < argc && !program)
		die("-- needs a program to run");
	int n = (end - i) / 2;
	if (count == 0 || n < 1 || (end - i) % 2 != 0 || n > MAX_MOUNTS)
		die("usage: l2b-idmap-bind --shift BASE:COUNT SOURCE TARGET [SOURCE TARGET ...] [-- PROGRAM ARGS...]");
	int ns = shift_userns(base, count);
	if (program && (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0))
		die("a private mount namespace: %s", strerror(errno));
	for (int k = 0; k < n; k++) {
		const char *source = argv[i + 2 * k], *target = argv[i + 2 * k + 1];
		int tree = open_tree(AT_FDCWD, source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
		if (tree < 0)
			die("clone %s: %s", source, strerror(errno));
		struct mount_attr attr = {
			.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOATIME,
			.attr_clr = MOUNT_ATTR__ATIME,
			.userns_fd = (unsigned long long)ns,
		};
		if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
			die("id-map %s: %s%s", source, strerror(errno), errno == EINVAL ? " (does its file system support id-mapped mounts? Linux >= 5.12, ext4)" : "");
		int dir = open(target, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dir < 0)
			die("target %s: %s", target, strerror(errno));
		if (move_mount(tree, "", dir, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
			die("mount on %s: %s", target, strerror(errno));
		close(dir);
		close(tree);
	}
	if (program) {
		close(ns);
		execv(program[0], program);
		die("exec %s: %s", program[0], strerror(errno));
	}
	return 0;
}
