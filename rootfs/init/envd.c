/* envd's supervision: start it, restart it with a backoff when it dies, stop it on shutdown. */
#include "init.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
/* A run this long counts as healthy: the next restart is quick again. */
#define HEALTHY_RUN_MS 10000

static pid_t pid = -1;
static int64_t started_at;
static int64_t restart_at = -1;
static int backoff_ms = BACKOFF_MIN_MS;
static unsigned restarts;

pid_t envd_pid(void)
{
	return pid;
}

/* argv: --envd-cmd and its --envd-arg's, else the guest's node + envd bundle (+ --envd-arg's). */
static int build_argv(const char **argv, char *listen, size_t listen_size)
{
	int n = 0;
	if (cfg.envd_cmd) {
		argv[n++] = cfg.envd_cmd;
	} else {
		snprintf(listen, listen_size, "unix://%s", cfg.envd_socket);
		const char *def[] = { GUEST_NODE, GUEST_NODE_FLAG, GUEST_ENVD, "--listen", listen, "--user", GUEST_USER, "--workdir", GUEST_HOME };
		for (size_t i = 0; i < sizeof def / sizeof def[0]; i++)
			argv[n++] = def[i];
	}
	for (int i = 0; i < cfg.n_envd_args; i++)
		argv[n++] = cfg.envd_args[i];
	argv[n] = NULL;
	return n;
}

static bool has_key(const char **env, int n, const char *kv)
{
	size_t k = strcspn(kv, "=");
	for (int i = 0; i < n; i++)
		if (!strncmp(env[i], kv, k) && env[i][k] == '=')
			return true;
	return false;
}

/*
 * VM mode: a clean environment. Process mode: the init's own (the runtime
 * chose it), PATH defaulted. Then LOCALE2B_LOG_LEVEL and every --env,
 * later entries replacing earlier ones.
 */
static int build_env(const char **env, int cap, char *log_kv, size_t log_size)
{
	const char *extra[MAX_ARGS + 4];
	int ne = 0;
	for (int i = cfg.n_env - 1; i >= 0; i--) /* the last --env of a key wins */
		if (!has_key(extra, ne, cfg.env[i]))
			extra[ne++] = cfg.env[i];
	if (cfg.envd_log) {
		snprintf(log_kv, log_size, "LOCALE2B_LOG_LEVEL=%s", cfg.envd_log);
		if (!has_key(extra, ne, log_kv))
			extra[ne++] = log_kv;
	}
	/*
	 * envd starts its processes through this binary's --spawn-helper
	 * (spawn.c): by the path it was started as when envd can run it from
	 * there (gVisor refuses /proc/1/exe), else through /proc/<pid>/exe (a
	 * process-mode sandbox whose root does not hold the binary).
	 */
	static char helper_kv[4200];
	const char *self = cfg.mode == MODE_VM ? GUEST_INIT : cfg.self;
	if (self && self[0] == '/' && access(self, X_OK) == 0)
		snprintf(helper_kv, sizeof helper_kv, "LOCALE2B_SPAWN_HELPER=%s", self);
	else
		snprintf(helper_kv, sizeof helper_kv, "LOCALE2B_SPAWN_HELPER=/proc/%d/exe", cfg.mode == MODE_VM ? 1 : (int)getpid());
	if (!has_key(extra, ne, helper_kv))
		extra[ne++] = helper_kv;
	const char *base_vm[] = { "PATH=" DEFAULT_PATH, "HOME=/root", "TERM=linux", "LANG=C.UTF-8", NULL };
	const char *path_only[] = { "PATH=" DEFAULT_PATH, NULL };
	int n = 0;
	for (int i = 0; i < ne && n < cap - 1; i++)
		env[n++] = extra[i];
	const char **inherit = cfg.mode == MODE_VM ? NULL : (const char **)environ;
	for (int i = 0; inherit && inherit[i] && n < cap - 1; i++)
		if (strchr(inherit[i], '=') && !has_key(env, n, inherit[i]))
			env[n++] = inherit[i];
	for (const char **b = cfg.mode == MODE_VM ? base_vm : path_only; *b && n < cap - 1; b++)
		if (!has_key(env, n, *b))
			env[n++] = *b;
	env[n] = NULL;
	return n;
}

void envd_print_argv(void)
{
	const char *argv[MAX_ARGS + 16];
	char listen[4200];
	int n = build_argv(argv, listen, sizeof listen);
	for (int i = 0; i < n; i++)
		printf("envd_arg=%s\n", argv[i]);
	const char *env[1024];
	char log_kv[64];
	n = build_env(env, 1024, log_kv, sizeof log_kv);
	if (cfg.mode == MODE_VM) /* process mode inherits: printing it would only echo the caller's */
		for (int i = 0; i < n; i++)
			printf("envd_env=%s\n", env[i]);
}

void envd_start(void)
{
	const char *argv[MAX_ARGS + 16];
	char listen[4200];
	build_argv(argv, listen, sizeof listen);
	const char *env[1024];
	char log_kv[64];
	build_env(env, 1024, log_kv, sizeof log_kv);
	restart_at = -1;
	pid_t child = fork();
	if (child < 0) {
		ilog("cannot start envd: fork: %s", strerror(errno));
		restart_at = now_ms() + BACKOFF_MAX_MS;
		return;
	}
	if (child == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		setsid();
		environ = (char **)env;
		execvp(argv[0], (char **)argv);
		ilog("cannot run envd (%s): %s", argv[0], strerror(errno));
		_exit(127);
	}
	pid = child;
	started_at = now_ms();
	ilog("envd started (pid %d)", (int)pid);
}

void envd_exited(pid_t p, int status)
{
	if (p != pid)
		return;
	pid = -1;
	char how[64];
	if (WIFSIGNALED(status))
		snprintf(how, sizeof how, "was killed by SIG%s", sigabbrev_np(WTERMSIG(status)));
	else
		snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
	if (shutting_down) {
		ilog("envd %s", how);
		return;
	}
	int64_t now = now_ms();
	if (now - started_at >= HEALTHY_RUN_MS)
		backoff_ms = BACKOFF_MIN_MS;
	restarts++;
	ilog("envd %s; restarting it in %d ms (restart %u)", how, backoff_ms, restarts);
	restart_at = now + backoff_ms;
	backoff_ms = backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
}

int64_t envd_deadline(void)
{
	return restart_at;
}

void envd_tick(int64_t now)
{
	if (restart_at >= 0 && now >= restart_at && !shutting_down)
		envd_start();
}

/* No more restarts; signal_all() then signals envd with everything else. */
void envd_stop(void)
{
	restart_at = -1;
}
