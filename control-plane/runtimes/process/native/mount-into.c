/*
 * l2b-mount-into: mounts host directories into a running sandbox's mount
 * namespace (the process runtime's volumes).
 *
 *   l2b-mount-into --pid PID --owner UID:GID SOURCE TARGET [SOURCE TARGET ...]
 *
 * Runs as real root on the host. Each SOURCE (a volume's host mount) is
 * cloned as a detached mount (open_tree OPEN_TREE_CLONE) while this process
 * is still in the host's mount namespace; then it enters the sandbox's mount
 * namespace (that of PID, the sandbox's first process), where `/` is the
 * sandbox's own root, and walks TARGET from there one component at a time
 * (O_PATH | O_NOFOLLOW: a symlink anywhere in it is refused, so the target
 * cannot be pointed elsewhere), making missing directories owned by
 * UID:GID (the sandbox's root, as the host sees it), and moves each clone
 * onto its target (move_mount). The sandbox's root has no capability over
 * that namespace (it belongs to the host's user namespace), so it cannot
 * unmount, remount or mount anything there; the host's directories it came
 * from are never visible inside.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_MOUNTS 64

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("l2b-mount-into: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* The directory TARGET names under `/` of the current mount namespace, made where missing; never through a symlink. */
static int open_target(const char *target, uid_t uid, gid_t gid)
{
	if (target[0] != '/' || strlen(target) >= 4096)
		die("target %s: expected an absolute path", target);
	char path[4096];
	strcpy(path, target);
	int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		die("open /: %s", strerror(errno));
	char *save = NULL;
	for (char *part = strtok_r(path, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
		if (strcmp(part, ".") == 0 || strcmp(part, "..") == 0)
			die("target %s: '.' and '..' are not allowed", target);
		int next = openat(dir, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && errno == ENOENT) {
			if (mkdirat(dir, part, 0755) < 0 && errno != EEXIST)
				die("target %s: mkdir %s: %s", target, part, strerror(errno));
			if (fchownat(dir, part, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
				die("target %s: chown %s: %s", target, part, strerror(errno));
			next = openat(dir, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (next < 0) {
			if (errno == ELOOP || errno == ENOTDIR)
				die("target %s: %s is a symlink or not a directory in the sandbox", target, part);
			die("target %s: %s: %s", target, part, strerror(errno));
		}
		close(dir);
		dir = next;
	}
	return dir;
}

int main(int argc, char **argv)
{
	long pid = 0;
	unsigned long uid = 0, gid = 0;
	int i = 1;
	for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
		if (strcmp(argv[i], "--pid") == 0)
			pid = strtol(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--owner") == 0) {
			if (sscanf(argv[i + 1], "%lu:%lu", &uid, &gid) != 2)
				die("--owner %s: expected UID:GID", argv[i + 1]);
		} else
			die("unknown option %s", argv[i]);
	}
	int n = (argc - i) / 2;
	if (pid <= 0 || n < 1 || (argc - i) % 2 != 0 || n > MAX_MOUNTS)
		die("usage: l2b-mount-into --pid PID --owner UID:GID SOURCE TARGET [SOURCE TARGET ...]");

	char nspath[64];
	snprintf(nspath, sizeof nspath, "/proc/%ld/ns/mnt", pid);
	int ns = open(nspath, O_RDONLY | O_CLOEXEC);
	if (ns < 0)
		die("open %s: %s", nspath, strerror(errno));
	int trees[MAX_MOUNTS];
	for (int k = 0; k < n; k++) {
		const char *source = argv[i + 2 * k];
		trees[k] = open_tree(AT_FDCWD, source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
		if (trees[k] < 0)
			die("clone %s: %s", source, strerror(errno));
	}
	if (setns(ns, CLONE_NEWNS) < 0)
		die("enter the sandbox's mount namespace (pid %ld): %s", pid, strerror(errno));
	if (chdir("/") < 0)
		die("chdir /: %s", strerror(errno));
	for (int k = 0; k < n; k++) {
		const char *target = argv[i + 2 * k + 1];
		int dir = open_target(target, (uid_t)uid, (gid_t)gid);
		if (move_mount(trees[k], "", dir, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
			die("mount on %s: %s", target, strerror(errno));
		close(dir);
		close(trees[k]);
	}
	return 0;
}
