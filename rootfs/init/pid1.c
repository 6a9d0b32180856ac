/* What an init does besides envd: mounts, hostname, clock, loopback, reaping, poweroff. */
#include "init.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char hostname_buf[256];
static char envd_log_buf[32];

static bool is_mountpoint(const char *path)
{
	char parent[4096];
	struct stat st, pst;
	if (snprintf(parent, sizeof parent, "%s/..", path) >= (int)sizeof parent)
		return false;
	if (stat(path, &st) < 0 || stat(parent, &pst) < 0)
		return false;
	return st.st_dev != pst.st_dev || st.st_ino == pst.st_ino;
}

static void mnt(const char *src, const char *target, const char *type, unsigned long flags, const char *data)
{
	if (mkdir(target, 0755) < 0 && errno != EEXIST) {
		ilog("mkdir %s: %s", target, strerror(errno));
		return;
	}
	if (is_mountpoint(target))
		return;
	if (mount(src, target, type, flags, data) < 0 && errno != EBUSY)
		ilog("mount %s on %s: %s", type, target, strerror(errno));
}

void mkdir_parents(const char *path, mode_t mode)
{
	char buf[4096];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
		return;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			ilog("mkdir %s: %s", buf, strerror(errno));
		*p = '/';
	}
}

/* The value of `key=` among the kernel parameters (space separated; no quoting needed for ours). */
static bool cmdline_value(const char *cmdline, const char *key, char *out, size_t size)
{
	size_t klen = strlen(key);
	const char *p = cmdline;
	bool found = false;
	while (*p) {
		while (isspace((unsigned char)*p))
			p++;
		const char *start = p;
		while (*p && !isspace((unsigned char)*p))
			p++;
		if ((size_t)(p - start) > klen && !strncmp(start, key, klen) && start[klen] == '=') {
			size_t n = (size_t)(p - start) - klen - 1;
			if (n >= size)
				n = size - 1;
			memcpy(out, start + klen + 1, n);
			out[n] = '\0';
			found = true; /* the last one wins, as with the kernel's own parameters */
		}
	}
	return found;
}

void parse_kernel_cmdline(void)
{
	const char *path = cfg.cmdline_file ? cfg.cmdline_file : "/proc/cmdline";
	char cmdline[4096] = "";
	FILE *f = fopen(path, "re");
	if (!f) {
		ilog("cannot read %s: %s", path, strerror(errno));
	} else {
		size_t n = fread(cmdline, 1, sizeof cmdline - 1, f);
		cmdline[n] = '\0';
		fclose(f);
	}
	char v[256];
	if (!cfg.hostname && cmdline_value(cmdline, "l2b.hostname", hostname_buf, sizeof hostname_buf) && hostname_buf[0])
		cfg.hostname = hostname_buf;
	if (cmdline_value(cmdline, "l2b.epoch", v, sizeof v)) {
		char *end;
		long long e = strtoll(v, &end, 10);
		if (*end || e <= 0)
			ilog("ignoring l2b.epoch=%s: expected unix seconds", v);
		else
			cfg.epoch = e;
	}
	if (cmdline_value(cmdline, "l2b.forward_ports", v, sizeof v))
		cfg.forward_ports = strcmp(v, "0") != 0 && strcmp(v, "off") != 0 && strcmp(v, "false") != 0;
	if (!cfg.envd_log && cmdline_value(cmdline, "l2b.envd_log", envd_log_buf, sizeof envd_log_buf) && envd_log_buf[0])
		cfg.envd_log = envd_log_buf;
	if (!cfg.hostname) {
		FILE *h = fopen("/etc/hostname", "re");
		if (h) {
			if (fgets(hostname_buf, sizeof hostname_buf, h)) {
				hostname_buf[strcspn(hostname_buf, " \t\r\n")] = '\0';
				if (hostname_buf[0])
					cfg.hostname = hostname_buf;
			}
			fclose(h);
		}
	}
}

/* fds 0-2 must be open, or the first sockets would take their numbers. */
static void ensure_std_fds(const char *dev)
{
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) >= 0)
			continue;
		int n = open(dev, O_RDWR | O_NOCTTY);
		if (n < 0)
			n = open("/dev/null", O_RDWR);
		if (n >= 0 && n != fd) {
			dup2(n, fd);
			close(n);
		}
	}
}

static void loopback_up(bool quiet)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0 && !(ifr.ifr_flags & IFF_UP)) {
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
		if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0 && !quiet)
			ilog("cannot bring lo up: %s", strerror(errno));
	}
	close(s);
}

static void set_hostname(void)
{
	if (cfg.hostname && sethostname(cfg.hostname, strlen(cfg.hostname)) < 0)
		ilog("sethostname %s: %s", cfg.hostname, strerror(errno));
}

static void set_clock(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (cfg.epoch <= 0 || ts.tv_sec >= cfg.epoch)
		return;
	struct timespec to = { .tv_sec = (time_t)cfg.epoch };
	if (clock_settime(CLOCK_REALTIME, &to) < 0)
		ilog("cannot set the clock to %lld: %s", cfg.epoch, strerror(errno));
}

/*
 * DNS for a guest whose kernel configured its NIC (ip=... on the kernel
 * command line): the kernel publishes the server in /proc/net/pnp in
 * resolv.conf syntax; copy it to /etc/resolv.conf. No NIC: leave it alone.
 */
static void write_resolv_conf(void)
{
	char buf[1024];
	int in = open("/proc/net/pnp", O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return;
	ssize_t n = read(in, buf, sizeof buf - 1);
	close(in);
	if (n <= 0)
		return;
	buf[n] = 0;
	if (!strstr(buf, "nameserver"))
		return;
	unlink("/etc/resolv.conf"); /* may be a dangling symlink */
	int out = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0 || write(out, buf, (size_t)n) != n)
		ilog("cannot write /etc/resolv.conf: %s", strerror(errno));
	if (out >= 0)
		close(out);
}

void vm_setup(void)
{
	umask(022);
	const unsigned long nosuid_nodev = MS_NOSUID | MS_NODEV;
	mnt("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	ensure_std_fds("/dev/console");
	setsid();
	mnt("proc", "/proc", "proc", nosuid_nodev | MS_NOEXEC, NULL);
	mnt("sysfs", "/sys", "sysfs", nosuid_nodev | MS_NOEXEC, NULL);
	mnt("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "ptmxmode=0666,gid=5,mode=620");
	mnt("shm", "/dev/shm", "tmpfs", nosuid_nodev, "mode=1777");
	mnt("cgroup2", "/sys/fs/cgroup", "cgroup2", nosuid_nodev | MS_NOEXEC, NULL);
	const char *links[][2] = { { "/proc/self/fd", "/dev/fd" }, { "/proc/self/fd/0", "/dev/stdin" },
				   { "/proc/self/fd/1", "/dev/stdout" }, { "/proc/self/fd/2", "/dev/stderr" } };
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
		if (symlink(links[i][0], links[i][1]) < 0 && errno != EEXIST)
			ilog("symlink %s: %s", links[i][1], strerror(errno));

	struct statvfs vfs;
	if (statvfs("/", &vfs) == 0 && (vfs.f_flag & ST_RDONLY) && mount(NULL, "/", NULL, MS_REMOUNT, NULL) < 0)
		ilog("cannot remount / read-write: %s", strerror(errno));
	mnt("run", "/run", "tmpfs", nosuid_nodev, "mode=0755");
	if (access("/tmp", W_OK) < 0)
		mnt("tmp", "/tmp", "tmpfs", nosuid_nodev, "mode=1777");

	parse_kernel_cmdline();
	set_hostname();
	set_clock();
	loopback_up(false);
	write_resolv_conf();
	reboot(RB_DISABLE_CAD); /* Ctrl-Alt-Del (Firecracker's SendCtrlAltDel) becomes SIGINT */
	mkdir_parents(cfg.envd_socket, 0755);
}

/*
 * Process mode. As PID 1 (of the runtime's pid, mount and UTS namespaces):
 * the namespace's own /proc, private ptys and shared memory where the tree
 * has those directories, the hostname, lo. Not as PID 1 (an ordinary process
 * on a host, as in tests): nothing system-wide; a subreaper instead.
 */
void process_setup(void)
{
	umask(022);
	ensure_std_fds("/dev/null");
	if (!cfg.pid1) {
		if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
			ilog("PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
		if (cfg.hostname)
			ilog("not PID 1: leaving the hostname alone");
		mkdir_parents(cfg.envd_socket, 0755);
		return;
	}
	if (!cfg.no_mounts) {
		char self[32] = "";
		ssize_t n = readlink("/proc/self", self, sizeof self - 1);
		if (n <= 0 || strcmp(self, "1") != 0) { /* the /proc of another pid namespace, or none */
			if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
				ilog("mount proc on /proc: %s", strerror(errno));
		}
		if (access("/dev/pts", F_OK) == 0 &&
		    mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,gid=5,mode=620") < 0)
			ilog("mount devpts on /dev/pts: %s", strerror(errno));
		if (access("/dev/shm", F_OK) == 0 && mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0)
			ilog("mount tmpfs on /dev/shm: %s", strerror(errno));
	}
	set_hostname();
	loopback_up(true);
	mkdir_parents(cfg.envd_socket, 0755);
}

void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_max < WANT_NOFILE) {
		struct rlimit want = { WANT_NOFILE, WANT_NOFILE };
		if (setrlimit(RLIMIT_NOFILE, &want) == 0)
			return;
	}
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < 2200)
		ilog("open files limited to %llu: fewer than ~1000 concurrent connections", (unsigned long long)rl.rlim_cur);
}

bool reap_children(void)
{
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid > 0) {
			if (pid == envd_pid())
				envd_exited(pid, status);
			continue;
		}
		if (pid < 0 && errno == EINTR)
			continue;
		return pid == 0; /* 0: children remain; -1 (ECHILD): none */
	}
}

/* The parent pid from /proc/PID/stat (after the last ')': state, then ppid). */
static pid_t stat_ppid(const char *pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%s/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	int ppid;
	if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
		return -1;
	return ppid;
}

/*
 * As PID 1 (of a VM or a pid namespace), kill(-1) reaches every other
 * process. Otherwise (a subreaper on a host), only our descendants: found
 * by walking /proc's parent links, never kill(-1). Each process gets the
 * signal once (envd's SIGTERM handler is a `once`: a second one kills it).
 */
void signal_all(int sig)
{
	if (cfg.pid1) {
		kill(-1, sig);
		return;
	}
	size_t cap = 1024, n = 0;
	pid_t(*procs)[2] = malloc(cap * sizeof *procs);
	DIR *d = opendir("/proc");
	if (!procs || !d) {
		free(procs);
		if (d)
			closedir(d);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		pid_t ppid = stat_ppid(e->d_name);
		if (ppid < 0)
			continue;
		if (n == cap) {
			void *more = realloc(procs, 2 * cap * sizeof *procs);
			if (!more)
				break;
			procs = more;
			cap *= 2;
		}
		procs[n][0] = (pid_t)atoi(e->d_name);
		procs[n][1] = ppid;
		n++;
	}
	closedir(d);
	/* Mark descendants: a fixed point over parent links (ppid 0 = not ours). */
	char *mine = calloc(n ? n : 1, 1);
	if (!mine) {
		free(procs);
		return;
	}
	pid_t self = getpid();
	for (bool changed = true; changed;) {
		changed = false;
		for (size_t i = 0; i < n; i++) {
			if (mine[i])
				continue;
			bool ours = procs[i][1] == self;
			for (size_t j = 0; !ours && j < n; j++)
				ours = mine[j] && procs[j][0] == procs[i][1];
			if (ours) {
				mine[i] = 1;
				changed = true;
			}
		}
	}
	for (size_t i = 0; i < n; i++)
		if (mine[i])
			kill(procs[i][0], sig);
	free(mine);
	free(procs);
}

void finish(int code)
{
	if (cfg.mode != MODE_VM)
		exit(code); /* the host's filesystems are not ours to sync */
	sync();
	ilog("powering off");
	reboot(RB_POWER_OFF);
	reboot(RB_AUTOBOOT); /* Firecracker has no power-off device: a reboot ends the VM */
	ilog("reboot: %s", strerror(errno));
	for (;;)
		pause();
}
