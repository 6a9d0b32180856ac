/* Flags, the event loop (one thread, epoll) and the shutdown sequence. */
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct config cfg = { .vsock_port = ENVD_PORT, .hybrid_fd = -1 };
int epfd = -1;
bool shutting_down;

static struct ep_tag signal_tag = { EP_SIGNAL };
static int sigfd = -1;
static enum { RUNNING, TERMINATING, KILLING } phase = RUNNING;
static int64_t phase_deadline = -1;

static const char usage[] =
	"Usage: locale2b-init                          VM mode: PID 1 of a guest (reads /proc/cmdline)\n"
	"       locale2b-init --hybrid-listen PATH [options]   process mode\n"
	"       locale2b-init --hybrid-fd N [options]          process mode, on an inherited listening socket\n"
	"       locale2b-init --sandbox ...                    the process runtime's launcher (--sandbox --help)\n"
	"\n"
	"Supervises envd and bridges connections to its Unix socket: in VM mode from\n"
	"AF_VSOCK port 49983, in process mode from a Unix socket speaking the hybrid-vsock\n"
	"handshake (`CONNECT 49983\\n` -> `OK 49983\\n`). Port forwarding (VM mode, or\n"
	"--forward-ports): on port 49982 the host sends `TCP <port>\\n`, the init answers `OK\\n`\n"
	"once connected to 127.0.0.1:<port> (or `ERR <why>\\n`), then relays the bytes.\n"
	"\n"
	"Options:\n"
	"  --hybrid-listen PATH   listen on a hybrid-vsock Unix socket (process mode)\n"
	"  --hybrid-fd N          accept hybrid-vsock connections on the listening socket N (process mode)\n"
	"  --vsock-listen PORT    listen on AF_VSOCK PORT, not as PID 1 (the VM listener, for checks)\n"
	"  --hostname NAME        set the hostname (VM default: l2b.hostname=, else /etc/hostname);\n"
	"                         process mode: only as PID 1 (of a pid and UTS namespace)\n"
	"  --forward-ports        process mode: also accept `CONNECT 49982` (user-port forwarding)\n"
	"  --no-mounts            process mode: mount nothing (mounts happen only as PID 1 anyway:\n"
	"                         a fresh /proc, /dev/pts and /dev/shm when those exist)\n"
	"  --envd-cmd PROG        run PROG instead of `" GUEST_NODE " " GUEST_NODE_FLAG " " GUEST_ENVD " --listen ...`\n"
	"  --envd-arg ARG         an argument for --envd-cmd, or one more for the default command (repeatable)\n"
	"  --envd-socket PATH     envd's Unix socket (default " GUEST_ENVD_SOCKET ")\n"
	"  --envd-log LEVEL       LOCALE2B_LOG_LEVEL for envd (VM default: l2b.envd_log=)\n"
	"  --env KEY=VALUE        one more environment variable for envd (repeatable)\n"
	"  --cmdline-file FILE    read kernel parameters from FILE, not /proc/cmdline\n"
	"  --print-config         print the resolved configuration and exit\n"
	"  -h, --help             show this help\n"
	"\n"
	"Kernel parameters (VM mode): l2b.hostname=NAME l2b.epoch=UNIX_SECONDS l2b.envd_log=LEVEL\n"
	"  l2b.forward_ports=0 (no port forwarding)\n"
	"Signals: SIGTERM, SIGINT (Ctrl-Alt-Del), SIGPWR, SIGUSR1, SIGUSR2 stop envd and every\n"
	"process (SIGTERM, then SIGKILL after 2 s), then power off (VM) or exit 0.\n";

void ilog(const char *fmt, ...)
{
	char line[1024];
	int n = snprintf(line, sizeof line, "locale2b-init: ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = strlen(line);
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}

int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void __attribute__((noreturn)) bad_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "locale2b-init: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'locale2b-init --help'.\n");
	exit(2);
}

/* `--name VALUE` or `--name=VALUE`; advances *i past the value. */
static const char *flag_value(int argc, char **argv, int *i, const char *name)
{
	const char *a = argv[*i];
	size_t n = strlen(name);
	if (strncmp(a, name, n) != 0)
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc)
		bad_usage("%s needs a value", name);
	return argv[++*i];
}

static void add_arg(const char **list, int *n, const char *v, const char *flag)
{
	if (*n >= MAX_ARGS - 1)
		bad_usage("too many %s", flag);
	list[(*n)++] = v;
}

static void parse_args(int argc, char **argv)
{
	const char *v;
	const char *vsock = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage, stdout);
			exit(0);
		} else if (!strcmp(a, "--no-mounts")) {
			cfg.no_mounts = true;
		} else if (!strcmp(a, "--forward-ports")) {
			cfg.forward_ports = true;
		} else if (!strcmp(a, "--print-config")) {
			cfg.print_config = true;
		} else if ((v = flag_value(argc, argv, &i, "--hybrid-listen"))) {
			cfg.hybrid_path = v;
		} else if ((v = flag_value(argc, argv, &i, "--hybrid-fd"))) {
			char *end;
			long fd = strtol(v, &end, 10);
			if (*end || !*v || fd < 0 || fd > 65535)
				bad_usage("--hybrid-fd %s: expected a file descriptor number", v);
			cfg.hybrid_fd = (int)fd;
		} else if ((v = flag_value(argc, argv, &i, "--vsock-listen"))) {
			vsock = v;
		} else if ((v = flag_value(argc, argv, &i, "--hostname"))) {
			cfg.hostname = v;
		} else if ((v = flag_value(argc, argv, &i, "--envd-cmd"))) {
			cfg.envd_cmd = v;
		} else if ((v = flag_value(argc, argv, &i, "--envd-arg"))) {
			add_arg(cfg.envd_args, &cfg.n_envd_args, v, "--envd-arg");
		} else if ((v = flag_value(argc, argv, &i, "--envd-socket"))) {
			cfg.envd_socket = v;
		} else if ((v = flag_value(argc, argv, &i, "--envd-log"))) {
			cfg.envd_log = v;
		} else if ((v = flag_value(argc, argv, &i, "--env"))) {
			if (!strchr(v, '=') || v[0] == '=')
				bad_usage("--env %s: expected KEY=VALUE", v);
			add_arg(cfg.env, &cfg.n_env, v, "--env");
		} else if ((v = flag_value(argc, argv, &i, "--cmdline-file"))) {
			cfg.cmdline_file = v;
		} else if (cfg.pid1) {
			/* The kernel passes unknown boot words (e.g. `single`) to init: not ours to refuse. */
			ilog("ignoring argument '%s'", a);
		} else {
			bad_usage("unknown argument '%s'", a);
		}
	}
	if ((cfg.hybrid_path || cfg.hybrid_fd >= 0) && vsock)
		bad_usage("%s", "--hybrid-listen/--hybrid-fd and --vsock-listen exclude each other");
	if (cfg.hybrid_path && cfg.hybrid_fd >= 0)
		bad_usage("%s", "--hybrid-listen and --hybrid-fd exclude each other");
	if (cfg.hybrid_fd >= 0) {
		cfg.mode = MODE_HYBRID;
	} else if (cfg.hybrid_path) {
		if (cfg.hybrid_path[0] != '/')
			bad_usage("--hybrid-listen %s: an absolute path is needed", cfg.hybrid_path);
		cfg.mode = MODE_HYBRID;
	} else if (vsock) {
		char *end;
		unsigned long p = strtoul(vsock, &end, 10);
		if (*end || !*vsock || p == 0 || p > 0xffffffffUL)
			bad_usage("--vsock-listen %s: expected a port number", vsock);
		cfg.vsock_port = (unsigned)p;
		cfg.mode = MODE_VSOCK;
	} else {
		cfg.mode = MODE_VM;
		cfg.forward_ports = true; /* unless l2b.forward_ports=0 */
	}
	if (!cfg.envd_socket)
		cfg.envd_socket = GUEST_ENVD_SOCKET;
	if (cfg.envd_socket[0] != '/')
		bad_usage("--envd-socket %s: an absolute path is needed", cfg.envd_socket);
	if (cfg.mode == MODE_VM && cfg.no_mounts && !cfg.print_config)
		bad_usage("%s", "--no-mounts is for process mode (--hybrid-listen)");
}

static void print_config(void)
{
	static const char *names[] = { "vm", "hybrid", "vsock" };
	printf("mode=%s\n", names[cfg.mode]);
	if (cfg.mode == MODE_HYBRID && cfg.hybrid_fd >= 0)
		printf("listen=fd:%d\n", cfg.hybrid_fd);
	else if (cfg.mode == MODE_HYBRID)
		printf("listen=unix:%s\n", cfg.hybrid_path);
	else
		printf("listen=vsock:%u\n", cfg.vsock_port);
	printf("mounts=%s\n", cfg.no_mounts ? "none" : cfg.mode == MODE_VM ? "vm" : "process");
	printf("hostname=%s\n", cfg.hostname ? cfg.hostname : "");
	printf("epoch=%lld\n", cfg.epoch);
	printf("envd_log=%s\n", cfg.envd_log ? cfg.envd_log : "");
	printf("envd_socket=%s\n", cfg.envd_socket);
	printf("forward_ports=%s\n", cfg.forward_ports ? "on" : "off");
	envd_print_argv();
}

/*
 * Process mode, before a checkpoint (gVisor cannot save a sandbox holding a
 * bound host socket or a connection on one): close the host-facing listener
 * and every relayed connection, then say so with an ack file beside the
 * socket. envd and every process keep running. SIG_RELISTEN (after the
 * restore, or when the checkpoint failed) opens the listener again.
 */
static char *ack_path(void)
{
	static char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 16];
	if (!cfg.hybrid_path)
		return NULL;
	snprintf(path, sizeof path, "%s.quiesced", cfg.hybrid_path);
	return path;
}

static void quiesce(void)
{
	if (shutting_down)
		return;
	bridge_close_all();
	const char *ack = ack_path();
	if (ack) {
		int fd = open(ack, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0)
			close(fd);
		else
			ilog("cannot write %s: %s", ack, strerror(errno));
	}
	ilog("quiesced: host listener and connections closed (checkpoint)");
}

static void relisten(void)
{
	if (shutting_down)
		return;
	const char *ack = ack_path();
	if (ack)
		unlink(ack);
	/* Listen anew even if a listener is open: its socket may be gone (the host asks again until it can connect). */
	listener_close();
	if (bridge_listen() < 0)
		ilog("cannot listen again after a checkpoint");
	else
		ilog("listening again after a checkpoint");
}

static void handle_signals(void)
{
	struct signalfd_siginfo si;
	char why[32];
	bool child = false;
	for (;;) {
		ssize_t n = read(sigfd, &si, sizeof si);
		if (n != (ssize_t)sizeof si)
			break;
		if (cfg.hybrid_path && (int)si.ssi_signo == SIG_QUIESCE) {
			quiesce();
			continue;
		}
		if (cfg.hybrid_path && (int)si.ssi_signo == SIG_RELISTEN) {
			relisten();
			continue;
		}
		switch (si.ssi_signo) {
		case SIGCHLD:
			child = true;
			break;
		case SIGTERM:
		case SIGINT:
		case SIGPWR:
		case SIGUSR1:
		case SIGUSR2:
			snprintf(why, sizeof why, "SIG%s", sigabbrev_np((int)si.ssi_signo));
			request_shutdown(why);
			break;
		default:
			break; /* SIGHUP and the like: an init ignores them */
		}
	}
	if (child && !reap_children() && shutting_down)
		finish(0);
}

void request_shutdown(const char *why)
{
	if (shutting_down)
		return;
	shutting_down = true;
	ilog("shutting down (%s)", why);
	bridge_close_all();
	envd_stop();
	signal_all(SIGTERM);
	phase = TERMINATING;
	phase_deadline = now_ms() + TERM_GRACE_MS;
	if (!reap_children())
		finish(0);
}

static void shutdown_tick(int64_t now)
{
	if (phase == TERMINATING && now >= phase_deadline) {
		ilog("processes still running after %d ms: killing them", TERM_GRACE_MS);
		signal_all(SIGKILL);
		phase = KILLING;
		phase_deadline = now + KILL_WAIT_MS;
		if (!reap_children())
			finish(0);
	} else if (phase == KILLING && now >= phase_deadline) {
		reap_children();
		finish(0);
	}
}

static int64_t earliest(int64_t a, int64_t b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return a < b ? a : b;
}

static void setup_signals(void)
{
	/* Dispositions survive exec: whoever started us may have ignored SIGINT or SIGQUIT. */
	for (int sig = 1; sig < SIGRTMIN; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	sigset_t set;
	sigemptyset(&set);
	int sigs[] = { SIGCHLD, SIGTERM, SIGINT, SIGPWR, SIGUSR1, SIGUSR2, SIGHUP };
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaddset(&set, sigs[i]);
	if (cfg.hybrid_path) {
		sigaddset(&set, SIG_QUIESCE);
		sigaddset(&set, SIG_RELISTEN);
	}
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0 || (sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
		ilog("signalfd: %s", strerror(errno));
		exit(1);
	}
	signal(SIGPIPE, SIG_IGN);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--sandbox"))
		return sandbox_main(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "--spawn-helper"))
		return spawn_helper_main();
	if (argc > 1 && !strcmp(argv[1], "--sendfile"))
		return sendfile_main(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "--receive"))
		return receive_main(argc, argv);
	cfg.pid1 = getpid() == 1;
	cfg.self = argv[0];
	parse_args(argc, argv);
	if (cfg.mode == MODE_VM && (cfg.print_config || cfg.cmdline_file))
		parse_kernel_cmdline();
	if (cfg.print_config) {
		print_config();
		return 0;
	}
	if (cfg.mode == MODE_VM && !cfg.pid1) {
		fprintf(stderr, "locale2b-init: not PID 1: VM mode runs only as a guest's init; "
				"pass --hybrid-listen PATH for process mode\n");
		return 2;
	}
	setup_signals();
	if (cfg.mode == MODE_VM)
		vm_setup();
	else
		process_setup();
	raise_nofile();

	epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &signal_tag };
	if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, sigfd, &ev) < 0) {
		ilog("epoll: %s", strerror(errno));
		finish(1);
	}
	if (bridge_listen() < 0 && cfg.mode != MODE_VM)
		finish(1);
	envd_start();

	struct epoll_event events[256];
	for (;;) {
		int64_t now = now_ms();
		int64_t dl = earliest(earliest(envd_deadline(), bridge_deadline()), phase_deadline);
		int timeout = dl < 0 ? -1 : dl <= now ? 0 : (int)(dl - now);
		int n = epoll_wait(epfd, events, 256, timeout);
		if (n < 0 && errno != EINTR) {
			ilog("epoll_wait: %s", strerror(errno));
			finish(1);
		}
		for (int i = 0; i < n; i++) {
			struct ep_tag *tag = events[i].data.ptr;
			if (tag->kind == EP_SIGNAL)
				handle_signals();
			else
				bridge_event(tag, events[i].events);
		}
		now = now_ms();
		bridge_tick(now);
		envd_tick(now);
		shutdown_tick(now);
	}
}
