/*
 * What a sandbox's processes may ask of the host kernel (sandbox mode): a
 * capability bounding set like Docker's default, and a seccomp filter in the
 * spirit of Docker's default profile. Both are installed by the sandbox's
 * first process just before it execs the image's init, so they hold for
 * envd and every process it starts, root included.
 */
#include "init.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Capabilities root keeps inside a sandbox (Docker's defaults); every other one leaves the bounding set. */
static const int kept_caps[] = {
	CAP_CHOWN,   CAP_DAC_OVERRIDE,	   CAP_FOWNER,	CAP_FSETID,	    CAP_KILL,	     CAP_SETGID, CAP_SETUID,
	CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_NET_RAW, CAP_SYS_CHROOT, CAP_MKNOD, CAP_AUDIT_WRITE, CAP_SETFCAP,
};

static int last_cap(void)
{
	FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
	int n = CAP_LAST_CAP;
	if (f) {
		if (fscanf(f, "%d", &n) != 1)
			n = CAP_LAST_CAP;
		fclose(f);
	}
	return n;
}

int drop_capabilities(void)
{
	int last = last_cap();
	for (int cap = 0; cap <= last; cap++) {
		bool keep = false;
		for (size_t i = 0; i < sizeof kept_caps / sizeof kept_caps[0]; i++)
			keep = keep || kept_caps[i] == cap;
		if (!keep && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL) {
			ilog("cannot drop capability %d from the bounding set: %s", cap, strerror(errno));
			return -1;
		}
	}
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	return 0;
}

#if defined(__x86_64__)
#define FILTER_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define FILTER_ARCH AUDIT_ARCH_AARCH64
#else
#error "no seccomp filter for this architecture"
#endif

/*
 * System calls refused with EPERM: kernel interfaces that are not namespaced
 * (keyrings, modules, kexec, BPF, perf, swap, clocks, quotas, accounting),
 * ones that only matter to an attacker (userfaultfd, open_by_handle_at,
 * io_uring's large surface), and mounting in every form (root inside has no
 * CAP_SYS_ADMIN anyway).
 */
static const long refused[] = {
	SYS_keyctl, SYS_add_key, SYS_request_key, SYS_bpf, SYS_perf_event_open, SYS_kexec_load,
#ifdef SYS_kexec_file_load
	SYS_kexec_file_load,
#endif
	SYS_userfaultfd, SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_open_by_handle_at, SYS_mount, SYS_umount2, SYS_pivot_root, SYS_swapon, SYS_swapoff, SYS_reboot, SYS_acct,
	SYS_quotactl, SYS_settimeofday, SYS_clock_settime, SYS_clock_adjtime, SYS_adjtimex, SYS_syslog, SYS_setns,
	SYS_fanotify_init, SYS_lookup_dcookie, SYS_vhangup,
#ifdef SYS_iopl
	SYS_iopl, SYS_ioperm,
#endif
#ifdef SYS_uselib
	SYS_uselib,
#endif
#ifdef SYS__sysctl
	SYS__sysctl,
#endif
#ifdef SYS_sysfs
	SYS_sysfs,
#endif
#ifdef SYS_create_module
	SYS_create_module, SYS_get_kernel_syms, SYS_query_module, SYS_nfsservctl,
#endif
#ifdef SYS_open_tree
	SYS_open_tree, SYS_move_mount, SYS_fsopen, SYS_fsconfig, SYS_fsmount, SYS_fspick,
#endif
#ifdef SYS_mount_setattr
	SYS_mount_setattr,
#endif
#ifdef SYS_quotactl_fd
	SYS_quotactl_fd,
#endif
#ifdef SYS_io_uring_setup
	SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register,
#endif
};

#define MAX_FILTER 160

struct filter {
	struct sock_filter ins[MAX_FILTER];
	unsigned short n;
};

static void put(struct filter *f, struct sock_filter s)
{
	if (f->n < MAX_FILTER)
		f->ins[f->n++] = s;
}

#define ARG_LO(i) (offsetof(struct seccomp_data, args) + (i) * sizeof(__u64))
#define RET(v) BPF_STMT(BPF_RET | BPF_K, (v))
#define LOAD(off) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off))
#define ERRNO(e) (SECCOMP_RET_ERRNO | ((e) & SECCOMP_RET_DATA))

/* `if nr == sys: <body of len instructions>` skipping the body otherwise. */
static void if_nr(struct filter *f, long sys, unsigned char body)
{
	put(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (__u32)sys, 0, body));
}

int install_seccomp(void)
{
	struct filter f = { .n = 0 };
	/* Another architecture's system call numbers (i386, x32) mean other calls: refuse them. */
	put(&f, (struct sock_filter)LOAD(offsetof(struct seccomp_data, arch)));
	put(&f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, FILTER_ARCH, 1, 0));
	put(&f, (struct sock_filter)RET(SECCOMP_RET_KILL_PROCESS));
	put(&f, (struct sock_filter)LOAD(offsetof(struct seccomp_data, nr)));
#if defined(__x86_64__)
	put(&f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1)); /* __X32_SYSCALL_BIT */
	put(&f, (struct sock_filter)RET(ERRNO(EPERM)));
#endif
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		if_nr(&f, refused[i], 1);
		put(&f, (struct sock_filter)RET(ERRNO(EPERM)));
	}
	/* clone3 passes its flags in memory, where a filter cannot look: ENOSYS makes libc fall back to clone. */
#ifdef SYS_clone3
	if_nr(&f, SYS_clone3, 1);
	put(&f, (struct sock_filter)RET(ERRNO(ENOSYS)));
#endif
	/* No new user namespaces (they would give root's capabilities back): clone and unshare with CLONE_NEWUSER. */
	long userns_calls[] = { SYS_clone, SYS_unshare };
	for (size_t i = 0; i < 2; i++) {
		if_nr(&f, userns_calls[i], 4);
		put(&f, (struct sock_filter)LOAD(ARG_LO(0)));
		put(&f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NEWUSER, 0, 1));
		put(&f, (struct sock_filter)RET(ERRNO(EPERM)));
		put(&f, (struct sock_filter)LOAD(offsetof(struct seccomp_data, nr)));
	}
	/* Terminal input injection (TIOCSTI) and console ioctls (TIOCLINUX). */
	if_nr(&f, SYS_ioctl, 5);
	put(&f, (struct sock_filter)LOAD(ARG_LO(1)));
	put(&f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 1, 0));
	put(&f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 0, 1));
	put(&f, (struct sock_filter)RET(ERRNO(EPERM)));
	put(&f, (struct sock_filter)LOAD(offsetof(struct seccomp_data, nr)));
	/* AF_VSOCK is not network-namespaced: a sandbox must not reach the host's vsock services. */
	if_nr(&f, SYS_socket, 4);
	put(&f, (struct sock_filter)LOAD(ARG_LO(0)));
	put(&f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_VSOCK, 0, 1));
	put(&f, (struct sock_filter)RET(ERRNO(EAFNOSUPPORT)));
	put(&f, (struct sock_filter)LOAD(offsetof(struct seccomp_data, nr)));
	put(&f, (struct sock_filter)RET(SECCOMP_RET_ALLOW));
	if (f.n >= MAX_FILTER) {
		ilog("seccomp filter too long (%u instructions)", f.n);
		return -1;
	}
	struct sock_fprog prog = { .len = f.n, .filter = f.ins };
	/* No PR_SET_NO_NEW_PRIVS: sudo and other set-uid programs must keep working; CAP_SYS_ADMIN in our
	 * user namespace is what lets us install the filter without it. */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0 &&
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0) {
		ilog("cannot install the seccomp filter: %s", strerror(errno));
		return -1;
	}
	return 0;
}
