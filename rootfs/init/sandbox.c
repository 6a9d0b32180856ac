/*
 * Sandbox mode (`locale2b-init --sandbox ...`): the process runtime's
 * launcher. Run by the control plane as real root on the host, it makes a
 * container-grade sandbox from a template's root filesystem and starts the
 * image's own init in it:
 *
 *   launcher (host pid the control plane tracks; real root; oom -1000)
 *     joins the sandbox's cgroups, creates the hybrid-vsock socket, then in a
 *     private mount namespace: the sandbox's disk (an ext4 image on a loop
 *     device, so diskSizeMB is enforced), an overlay (the template below,
 *     the disk above) pivoted to as `/`, a minimal /dev, /run; forks:
 *   first process (pid 1 of a new pid namespace)
 *     mounts /proc (sensitive files masked, /proc/sys read-only), unshares a
 *     user namespace (root inside = an unprivileged host uid: the id map the
 *     launcher writes), UTS, IPC, network and cgroup namespaces; the launcher
 *     mounts /sys (read-only) and /dev/mqueue from inside them; then it names
 *     the host, brings lo up, writes /etc/hostname, hosts and resolv.conf as
 *     the sandbox's root, keeps only fds 0-3, drops capabilities to Docker's
 *     default set, installs the seccomp filter (confine.c) and execs
 *     /sbin/locale2b-init --hybrid-fd 3 (process mode) which runs envd.
 *
 * The launcher reports `pid <first process's host pid>` on --status-fd once
 * the namespaces exist (the control plane then moves a veth into the network
 * namespace), relays the sandbox's log lines (a pipe) to its own stderr with a
 * size cap, and exits with the sandbox's status. Nothing of the host's
 * filesystem is left in the sandbox's mount namespace; no host path is
 * written after the pivot except through descriptors opened before it.
 */
#include "init.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/loop.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_LIST 16
/* The sandbox's log (init and envd) kept on the host: past this it starts over. */
#define LOG_CAP (16 * 1024 * 1024)

static struct {
	const char *id;
	const char *rootfs;
	const char *disk;
	const char *state;
	const char *socket;
	unsigned long id_base, id_count;
	unsigned long shm_mb;
	const char *cgroup_procs[MAX_LIST];
	int n_cgroup;
	const char *dns[MAX_LIST];
	int n_dns;
	const char *init_args[MAX_ARGS];
	int n_init_args;
	int status_fd;
} sc = { .id_count = 65536, .shm_mb = 64, .status_fd = -1 };

static bool fresh_disk; /* the writable layer was created by this launch */

static void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	ilog("sandbox set-up failed: %s", msg);
	if (sc.status_fd >= 0) {
		dprintf(sc.status_fd, "error %s\n", msg);
		close(sc.status_fd);
	}
	_exit(1);
}

static const char sandbox_usage[] =
	"Usage: locale2b-init --sandbox --id ID --rootfs DIR --disk FILE --state DIR --socket PATH\n"
	"                     [--id-map BASE:COUNT] [--shm-mb N] [--cgroup-procs FILE]... [--dns IP]...\n"
	"                     [--status-fd N] [--init-arg ARG]...\n"
	"Runs as root on a host: a sandbox on the template root DIR (the overlay's lower layer, owned by\n"
	"the mapped ids) with FILE (ext4) as its writable layer, in its own user, mount, pid, UTS, IPC,\n"
	"network and cgroup namespaces, serving the hybrid-vsock handshake on PATH.\n";

static unsigned long number(const char *flag, const char *v, unsigned long max)
{
	char *end;
	errno = 0;
	unsigned long n = strtoul(v, &end, 10);
	if (errno || end == v || *end || n > max) {
		fprintf(stderr, "locale2b-init: %s %s: expected a number up to %lu\n", flag, v, max);
		exit(2);
	}
	return n;
}

static void parse(int argc, char **argv)
{
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(sandbox_usage, stdout);
			exit(0);
		}
		if (!v || strncmp(a, "--", 2) != 0) {
			fprintf(stderr, "locale2b-init: --sandbox: unexpected argument '%s'\n%s", a, sandbox_usage);
			exit(2);
		}
		i++;
		if (!strcmp(a, "--id"))
			sc.id = v;
		else if (!strcmp(a, "--rootfs"))
			sc.rootfs = v;
		else if (!strcmp(a, "--disk"))
			sc.disk = v;
		else if (!strcmp(a, "--state"))
			sc.state = v;
		else if (!strcmp(a, "--socket"))
			sc.socket = v;
		else if (!strcmp(a, "--shm-mb"))
			sc.shm_mb = number(a, v, 1 << 20);
		else if (!strcmp(a, "--status-fd"))
			sc.status_fd = (int)number(a, v, 1 << 20);
		else if (!strcmp(a, "--id-map")) {
			char base[32];
			const char *colon = strchr(v, ':');
			if (!colon || (size_t)(colon - v) >= sizeof base) {
				fprintf(stderr, "locale2b-init: --id-map %s: expected BASE:COUNT\n", v);
				exit(2);
			}
			memcpy(base, v, (size_t)(colon - v));
			base[colon - v] = '\0';
			sc.id_base = number(a, base, 0xfffffffeUL);
			sc.id_count = number(a, colon + 1, 0xfffffffeUL);
		} else if (!strcmp(a, "--cgroup-procs") && sc.n_cgroup < MAX_LIST)
			sc.cgroup_procs[sc.n_cgroup++] = v;
		else if (!strcmp(a, "--dns") && sc.n_dns < MAX_LIST)
			sc.dns[sc.n_dns++] = v;
		else if (!strcmp(a, "--init-arg") && sc.n_init_args < MAX_ARGS - 16)
			sc.init_args[sc.n_init_args++] = v;
		else {
			fprintf(stderr, "locale2b-init: --sandbox: unknown or repeated too often: %s\n", a);
			exit(2);
		}
	}
	const char *missing = !sc.id ? "--id" : !sc.rootfs ? "--rootfs" : !sc.disk ? "--disk" : !sc.state ? "--state" : !sc.socket ? "--socket" : NULL;
	if (missing) {
		fprintf(stderr, "locale2b-init: --sandbox needs %s\n%s", missing, sandbox_usage);
		exit(2);
	}
	for (const char *p = sc.id; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-') {
			fprintf(stderr, "locale2b-init: --id %s: letters, digits and '-' only\n", sc.id);
			exit(2);
		}
	/* overlayfs separates its options with ',' and lower layers with ':'. */
	const char *paths[] = { sc.rootfs, sc.state };
	for (int i = 0; i < 2; i++)
		if (paths[i][0] != '/' || strpbrk(paths[i], ",:\\"))
			die("%s: an absolute path without ',', ':' or '\\' is needed", paths[i]);
	if (sc.id_base == 0 || sc.id_count < 1001)
		die("--id-map: a base above 0 and at least 1001 ids are needed");
}

static void write_file(int dirfd, const char *path, const char *text)
{
	int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		die("open %s: %s", path, strerror(errno));
	ssize_t n = write(fd, text, strlen(text));
	if (n != (ssize_t)strlen(text))
		die("write %s: %s", path, n < 0 ? strerror(errno) : "short write");
	close(fd);
}

static void mkdirs(const char *path, mode_t mode)
{
	char buf[4096];
	snprintf(buf, sizeof buf, "%s/", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			die("mkdir %s: %s", buf, strerror(errno));
		*p = '/';
	}
}

static void mount_or_die(const char *src, const char *target, const char *type, unsigned long flags, const char *data)
{
	if (mount(src, target, type, flags, data) < 0)
		die("mount %s on %s: %s", type ? type : src ? src : "(remount)", target, strerror(errno));
}

/* The disk image on a free loop device that detaches itself when unmounted; returns the device's fd. */
static int attach_loop(const char *image, char *dev, size_t size)
{
	int img = open(image, O_RDWR | O_CLOEXEC);
	if (img < 0)
		die("open %s: %s", image, strerror(errno));
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		die("open /dev/loop-control: %s (is the loop module loaded?)", strerror(errno));
	for (int attempt = 0; attempt < 100; attempt++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0)
			die("LOOP_CTL_GET_FREE: %s", strerror(errno));
		snprintf(dev, size, "/dev/loop%d", n);
		int fd = open(dev, O_RDWR | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT && mknod(dev, S_IFBLK | 0660, makedev(7, (unsigned)n)) == 0)
			fd = open(dev, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			die("open %s: %s", dev, strerror(errno));
		struct loop_config lc;
		memset(&lc, 0, sizeof lc);
		lc.fd = (unsigned)img;
		lc.info.lo_flags = LO_FLAGS_AUTOCLEAR;
		if (ioctl(fd, LOOP_CONFIGURE, &lc) == 0) {
			close(img);
			close(ctl);
			return fd;
		}
		int err = errno;
		if (err == EINVAL || err == ENOTTY) { /* kernels before 5.8: the two-step form */
			if (ioctl(fd, LOOP_SET_FD, img) == 0) {
				struct loop_info64 info;
				memset(&info, 0, sizeof info);
				info.lo_flags = LO_FLAGS_AUTOCLEAR;
				if (ioctl(fd, LOOP_SET_STATUS64, &info) == 0) {
					close(img);
					close(ctl);
					return fd;
				}
				ioctl(fd, LOOP_CLR_FD, 0);
			}
			err = errno;
		}
		close(fd);
		if (err != EBUSY) /* EBUSY: another launcher took that device first */
			die("attaching %s to %s: %s", image, dev, strerror(err));
	}
	die("no free loop device for %s", image);
}

/* The writable layer: the ext4 image mounted at <state>/disk, its upper/ owned by the sandbox's root. */
static void mount_disk(char *upper, char *work, size_t size)
{
	char target[4096], dev[64];
	snprintf(target, sizeof target, "%s/disk", sc.state);
	if (mkdir(target, 0700) < 0 && errno != EEXIST)
		die("mkdir %s: %s", target, strerror(errno));
	int loop = attach_loop(sc.disk, dev, sizeof dev);
	/* discard: what the sandbox deletes is given back to the host's disk (holes in the image). */
	mount_or_die(dev, target, "ext4", MS_NODEV | MS_NOATIME, "discard");
	close(loop);
	snprintf(upper, size, "%s/upper", target);
	snprintf(work, size, "%s/work", target);
	fresh_disk = mkdir(upper, 0755) == 0;
	if (!fresh_disk && errno != EEXIST)
		die("mkdir %s: %s", upper, strerror(errno));
	if (fresh_disk && chown(upper, (uid_t)sc.id_base, (gid_t)sc.id_base) < 0)
		die("chown %s: %s", upper, strerror(errno));
	if (mkdir(work, 0700) < 0 && errno != EEXIST)
		die("mkdir %s: %s", work, strerror(errno));
}

/* The hybrid-vsock socket the host dials (the sandbox never sees the directory it is in). */
static int listen_socket(void)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	if (strlen(sc.socket) >= sizeof sun.sun_path)
		die("%s: path too long for a Unix socket", sc.socket);
	strcpy(sun.sun_path, sc.socket);
	struct stat st;
	if (lstat(sc.socket, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(sc.socket);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof sun) < 0 || chmod(sc.socket, 0600) < 0 || listen(fd, 4096) < 0)
		die("cannot listen on %s: %s", sc.socket, strerror(errno));
	return fd;
}

static void make_node(const char *path, mode_t mode, unsigned maj, unsigned min)
{
	if (mknod(path, S_IFCHR | mode, makedev(maj, min)) < 0 || chmod(path, mode) < 0 ||
	    chown(path, (uid_t)sc.id_base, (gid_t)sc.id_base) < 0)
		die("mknod %s: %s", path, strerror(errno));
}

/* Inside the new root: /dev with only harmless devices, its own ptys and shared memory, and /run. */
static void make_dev(void)
{
	char opts[128];
	unsigned long base = sc.id_base;
	snprintf(opts, sizeof opts, "mode=0755,size=1m,nr_inodes=4096,uid=%lu,gid=%lu", base, base);
	mount_or_die("l2b-dev", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, opts);
	make_node("/dev/null", 0666, 1, 3);
	make_node("/dev/zero", 0666, 1, 5);
	make_node("/dev/full", 0666, 1, 7);
	make_node("/dev/random", 0666, 1, 8);
	make_node("/dev/urandom", 0666, 1, 9);
	make_node("/dev/tty", 0666, 5, 0);
	const char *dirs[] = { "/dev/pts", "/dev/shm", "/dev/mqueue" };
	for (size_t i = 0; i < 3; i++)
		if (mkdir(dirs[i], i == 1 ? 01777 : 0755) < 0 || chown(dirs[i], (uid_t)base, (gid_t)base) < 0)
			die("mkdir %s: %s", dirs[i], strerror(errno));
	snprintf(opts, sizeof opts, "newinstance,ptmxmode=0666,mode=0620,gid=%lu", base + 5);
	mount_or_die("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, opts);
	snprintf(opts, sizeof opts, "mode=1777,size=%lum,uid=%lu,gid=%lu", sc.shm_mb, base, base);
	mount_or_die("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts);
	const char *links[][2] = { { "pts/ptmx", "/dev/ptmx" },	     { "/proc/self/fd", "/dev/fd" },
				   { "/proc/self/fd/0", "/dev/stdin" }, { "/proc/self/fd/1", "/dev/stdout" },
				   { "/proc/self/fd/2", "/dev/stderr" } };
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
		if (symlink(links[i][0], links[i][1]) < 0 || lchown(links[i][1], (uid_t)base, (gid_t)base) < 0)
			die("symlink %s: %s", links[i][1], strerror(errno));
	mkdirs("/run", 0755);
	snprintf(opts, sizeof opts, "mode=0755,size=64m,uid=%lu,gid=%lu", base, base);
	mount_or_die("run", "/run", "tmpfs", MS_NOSUID | MS_NODEV, opts);
}

/*
 * A boot id of the sandbox's own over the host's, as a VM has one: new at every start (a sandbox resumed
 * from its files boots anew, and shows it), and nothing that tells sandboxes on one host apart from others.
 * Runs in the new root, after make_dev(): the file is made on its /dev, bound over the kernel's, and
 * unlinked (the bind keeps it; nothing else shows it).
 */
static void own_boot_id(void)
{
	const char *target = "/proc/sys/kernel/random/boot_id", *file = "/dev/.l2b-boot-id";
	if (access(target, F_OK) < 0)
		return;
	unsigned char b[16];
	if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
		die("getrandom: %s", strerror(errno));
	b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* a version 4 UUID, as the kernel's */
	b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
	char text[40];
	snprintf(text, sizeof text, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n", b[0], b[1], b[2],
		 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
	int fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || close(fd) < 0)
		die("writing %s: %s", file, strerror(errno));
	mount_or_die(file, target, NULL, MS_BIND, NULL);
	mount_or_die(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (unlink(file) < 0)
		die("unlink %s: %s", file, strerror(errno));
}

/* /proc of the sandbox's pid namespace, with what Docker masks masked and the kernel's knobs read-only. */
static void make_proc(void)
{
	mkdirs("/proc", 0555);
	mount_or_die("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	const char *files[] = { "/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats",
				"/proc/kallsyms", "/proc/sysrq-trigger" };
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
		if (access(files[i], F_OK) == 0)
			mount_or_die("/dev/null", files[i], NULL, MS_BIND, NULL);
	const char *dirs[] = { "/proc/acpi", "/proc/scsi", "/proc/asound" };
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
		if (access(dirs[i], F_OK) == 0)
			mount_or_die("l2b-masked", dirs[i], "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0");
	own_boot_id();
	const char *ro[] = { "/proc/sys", "/proc/irq", "/proc/bus", "/proc/fs" };
	for (size_t i = 0; i < sizeof ro / sizeof ro[0]; i++) {
		if (access(ro[i], F_OK) < 0)
			continue;
		mount_or_die(ro[i], ro[i], NULL, MS_BIND | MS_REC, NULL);
		mount_or_die(NULL, ro[i], NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	}
}

/* Joins the namespace `name` of `pid` (through the host's /proc), returning our own to come back to. */
static void enter_ns(int procfd, pid_t pid, const char *name, int nstype)
{
	char path[64];
	snprintf(path, sizeof path, "%d/ns/%s", (int)pid, name);
	int fd = openat(procfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, nstype) < 0)
		die("setns %s: %s", path, strerror(errno));
	close(fd);
}

static void write_etc(const char *name, const char *text)
{
	char path[64];
	snprintf(path, sizeof path, "/etc/%s", name);
	/* As the sandbox's root, never through a symlink: whatever the layer holds cannot redirect us. */
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		ilog("cannot write %s: %s", path, strerror(errno));
		return;
	}
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		ilog("cannot write %s: %s", path, strerror(errno));
	close(fd);
}

/* Whether /etc/hostname names another sandbox: the layer is a snapshot of it (read as the sandbox's root, no symlinks). */
static bool named_for_another(void)
{
	char text[256];
	int fd = open("/etc/hostname", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, text, sizeof text - 1);
	close(fd);
	if (n <= 0)
		return false;
	text[n] = 0;
	text[strcspn(text, "\n")] = 0;
	return strcmp(text, sc.id) != 0;
}

static void name_the_host(void)
{
	if (sethostname(sc.id, strlen(sc.id)) < 0)
		ilog("sethostname: %s", strerror(errno));
	char text[1024];
	/* A new layer, or one copied from another sandbox's snapshot: this sandbox's own name. */
	if (fresh_disk || named_for_another()) {
		snprintf(text, sizeof text, "%s\n", sc.id);
		write_etc("hostname", text);
		snprintf(text, sizeof text,
			 "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\n"
			 "ff02::2\tip6-allrouters\n127.0.1.1\t%s\n",
			 sc.id);
		write_etc("hosts", text);
	}
	if (sc.n_dns) {
		size_t n = (size_t)snprintf(text, sizeof text, "# written by locale2b for this sandbox\n");
		for (int i = 0; i < sc.n_dns && n < sizeof text; i++)
			n += (size_t)snprintf(text + n, sizeof text - n, "nameserver %s\n", sc.dns[i]);
		write_etc("resolv.conf", text);
	}
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0 || (ifr.ifr_flags |= IFF_UP | IFF_RUNNING, ioctl(s, SIOCSIFFLAGS, &ifr) < 0))
		ilog("cannot bring lo up: %s", strerror(errno));
	if (s >= 0)
		close(s);
}

static void close_from(int first)
{
	if (syscall(SYS_close_range, (unsigned)first, ~0U, 0) == 0)
		return;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	int dfd = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d)))
		if (isdigit((unsigned char)e->d_name[0]) && atoi(e->d_name) >= first && atoi(e->d_name) != dfd)
			close(atoi(e->d_name));
	closedir(d);
}

static char sync_byte(int fd)
{
	char c = 0;
	ssize_t n;
	do
		n = read(fd, &c, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 ? c : 0;
}

/* The sandbox's first process: pid 1 of its pid namespace, until it execs the image's init. */
static void __attribute__((noreturn)) first_process(int to_parent, int from_parent, int listen_fd, int log_fd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (dup2(log_fd, STDOUT_FILENO) < 0 || dup2(log_fd, STDERR_FILENO) < 0)
		_exit(1);
	sc.status_fd = -1; /* the launcher reports; errors here go to the log and our exit status */
	make_proc();
	if (unshare(CLONE_NEWUSER | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWCGROUP) < 0)
		die("unshare (user, uts, ipc, net, cgroup namespaces): %s", strerror(errno));
	if (write(to_parent, "u", 1) != 1 || sync_byte(from_parent) != 'g')
		_exit(1); /* the launcher failed: it says why */
	if (setresgid(0, 0, 0) < 0 || setgroups(0, NULL) < 0 || setresuid(0, 0, 0) < 0)
		die("becoming root of the user namespace: %s", strerror(errno));
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* a change of credentials cleared it */
	name_the_host();
	if (chdir("/") < 0)
		die("chdir /: %s", strerror(errno));
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(listen_fd, 3) < 0 || fcntl(3, F_SETFD, 0) < 0)
		die("descriptors: %s", strerror(errno));
	close_from(4);
	if (drop_capabilities() < 0 || install_seccomp() < 0)
		die("confining the sandbox failed");
	const char *argv[MAX_ARGS + 8];
	int n = 0;
	argv[n++] = GUEST_INIT;
	argv[n++] = "--hybrid-fd";
	argv[n++] = "3";
	argv[n++] = "--no-mounts";
	argv[n++] = "--forward-ports";
	for (int i = 0; i < sc.n_init_args; i++)
		argv[n++] = sc.init_args[i];
	argv[n] = NULL;
	const char *env[] = { "PATH=" DEFAULT_PATH, "HOME=/root", "LANG=C.UTF-8", NULL };
	execve(GUEST_INIT, (char **)argv, (char **)env);
	die("exec %s: %s (is this a locale2b template?)", GUEST_INIT, strerror(errno));
}

/* Copies the sandbox's log lines to our stderr (the host's log file), starting over past LOG_CAP. */
static void relay_log(int from)
{
	char buf[16384];
	for (;;) {
		ssize_t n = read(from, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		struct stat st;
		if (fstat(STDERR_FILENO, &st) == 0 && S_ISREG(st.st_mode) && st.st_size + n > LOG_CAP) {
			if (ftruncate(STDERR_FILENO, 0) == 0)
				ilog("the sandbox's log passed %d MiB: started over", LOG_CAP >> 20);
		}
		ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
		(void)w;
	}
}

int sandbox_main(int argc, char **argv)
{
	parse(argc, argv);
	if (geteuid() != 0)
		die("sandbox mode needs root (it makes namespaces, mounts and an id map)");
	umask(0);
	/* Only what the control plane meant to give: no descriptor of whoever started it reaches the sandbox. */
	if (sc.status_fd >= 0 && sc.status_fd != 3) {
		if (dup2(sc.status_fd, 3) < 0)
			die("status fd: %s", strerror(errno));
		sc.status_fd = 3;
	}
	close_from(sc.status_fd >= 0 ? 4 : 3);
	signal(SIGPIPE, SIG_IGN);
	int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (oom < 0 || write(oom, "-1000", 5) != 5)
		ilog("cannot protect the sandbox's init and envd from the OOM killer: %s", strerror(errno));
	if (oom >= 0)
		close(oom);
	char pid_text[32];
	snprintf(pid_text, sizeof pid_text, "%d", (int)getpid());
	for (int i = 0; i < sc.n_cgroup; i++) {
		int fd = open(sc.cgroup_procs[i], O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, pid_text, strlen(pid_text)) < 0)
			die("joining %s: %s", sc.cgroup_procs[i], strerror(errno));
		close(fd);
	}
	int procfd = open("/proc", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	int host_net = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	int host_ipc = open("/proc/self/ns/ipc", O_RDONLY | O_CLOEXEC);
	if (procfd < 0 || host_net < 0 || host_ipc < 0)
		die("open /proc: %s", strerror(errno));
	int listen_fd = listen_socket();

	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die("private mount namespace: %s", strerror(errno));
	char upper[4200], work[4200], root[4200], opts[12800];
	mount_disk(upper, work, sizeof upper);
	snprintf(root, sizeof root, "%s/root", sc.state);
	if (mkdir(root, 0755) < 0 && errno != EEXIST)
		die("mkdir %s: %s", root, strerror(errno));
	snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s", sc.rootfs, upper, work);
	mount_or_die("l2b-root", root, "overlay", MS_NODEV, opts);
	/* The overlay becomes `/`; the host's tree is detached (pivot_root(".", ".") stacks it, then it goes). */
	if (chdir(root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		die("pivot_root into the sandbox's root: %s", strerror(errno));
	make_dev();

	int up[2], down[2], logp[2];
	if (pipe2(up, O_CLOEXEC) < 0 || pipe2(down, O_CLOEXEC) < 0 || pipe2(logp, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	if (unshare(CLONE_NEWPID) < 0)
		die("pid namespace: %s", strerror(errno));
	pid_t child = fork();
	if (child < 0)
		die("fork: %s", strerror(errno));
	if (child == 0) {
		close(up[0]);
		close(down[1]);
		close(logp[0]);
		first_process(up[1], down[0], listen_fd, logp[1]);
	}
	close(up[1]);
	close(down[0]);
	close(logp[1]);
	close(listen_fd);
	if (sync_byte(up[0]) != 'u')
		die("the sandbox's first process failed before its user namespace existed (see the log)");
	char map[64], path[64];
	snprintf(map, sizeof map, "0 %lu %lu\n", sc.id_base, sc.id_count);
	snprintf(path, sizeof path, "%d/uid_map", (int)child);
	write_file(procfd, path, map);
	snprintf(path, sizeof path, "%d/gid_map", (int)child);
	write_file(procfd, path, map);
	/* sysfs shows the network namespace of whoever mounts it, mqueue the IPC namespace: mount them from inside. */
	enter_ns(procfd, child, "net", CLONE_NEWNET);
	mount_or_die("sysfs", "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (access("/sys/firmware", F_OK) == 0)
		mount_or_die("l2b-masked", "/sys/firmware", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0");
	enter_ns(procfd, child, "ipc", CLONE_NEWIPC);
	mount_or_die("mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (setns(host_net, CLONE_NEWNET) < 0 || setns(host_ipc, CLONE_NEWIPC) < 0)
		die("setns back to the host: %s", strerror(errno));
	close(procfd);
	close(host_net);
	close(host_ipc);
	if (write(down[1], "g", 1) != 1)
		die("the sandbox's first process is gone");
	close(down[1]);
	if (sc.status_fd >= 0) {
		dprintf(sc.status_fd, "pid %d\n", (int)child);
		close(sc.status_fd);
		sc.status_fd = -1;
	}
	relay_log(logp[0]);
	int status;
	while (waitpid(child, &status, 0) < 0)
		if (errno != EINTR)
			return 1;
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
