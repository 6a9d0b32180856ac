// The request and response bodies of the Firecracker API calls this runtime
// uses, as named in Firecracker's swagger (../shared/firecracker/
// firecracker-swagger.yaml, API 1.17). Only the fields we send or read.

/** `#/definitions/MachineConfiguration` (PUT /machine-config). */
export interface MachineConfiguration {
  vcpu_count: number;
  mem_size_mib: number;
  smt?: boolean;
  track_dirty_pages?: boolean;
}

/** `#/definitions/BootSource` (PUT /boot-source). */
export interface BootSource {
  kernel_image_path: string;
  boot_args?: string;
  initrd_path?: string;
}

/** `#/definitions/Drive` (PUT /drives/{drive_id}): a virtio-block drive backed by a host file. */
export interface Drive {
  drive_id: string;
  path_on_host: string;
  is_root_device: boolean;
  is_read_only: boolean;
  cache_type?: "Unsafe" | "Writeback";
  io_engine?: "Sync" | "Async";
}

/** `#/definitions/Vsock` (PUT /vsock): Firecracker listens on `uds_path` (hybrid vsock, `CONNECT <port>\n`). */
export interface Vsock {
  guest_cid: number;
  uds_path: string;
}

/** `#/definitions/NetworkInterface` (PUT /network-interfaces/{iface_id}). */
export interface NetworkInterface {
  iface_id: string;
  host_dev_name: string;
  guest_mac?: string;
}

/** `#/definitions/InstanceActionInfo` (PUT /actions). */
export interface InstanceActionInfo {
  action_type: "InstanceStart" | "SendCtrlAltDel" | "FlushMetrics";
}

/** `#/definitions/Vm` (PATCH /vm). */
export interface VmState {
  state: "Paused" | "Resumed";
}

/** `#/definitions/SnapshotCreateParams` (PUT /snapshot/create). */
export interface SnapshotCreateParams {
  snapshot_type?: "Full" | "Diff";
  snapshot_path: string;
  mem_file_path: string;
}

/**
 * `#/definitions/SnapshotLoadParams` (PUT /snapshot/load). The guest memory
 * comes from `mem_backend` (the older `mem_file_path` is deprecated and must
 * not be sent together with it).
 */
export interface SnapshotLoadParams {
  snapshot_path: string;
  mem_backend: { backend_type: "File" | "Uffd"; backend_path: string };
  resume_vm?: boolean;
  track_dirty_pages?: boolean;
  /** `#/definitions/NetworkOverride`: the tap device each interface uses from now on (a fork's own). */
  network_overrides?: { iface_id: string; host_dev_name: string }[];
  /** `#/definitions/VsockOverride`: the vsock device's Unix socket from now on. */
  vsock_override?: { uds_path: string };
}

/** `#/definitions/Logger` (PUT /logger). */
export interface LoggerConfig {
  log_path?: string;
  level?: "Error" | "Warning" | "Info" | "Debug" | "Trace" | "Off";
  show_level?: boolean;
  show_log_origin?: boolean;
}

/** `#/definitions/Metrics` (PUT /metrics). */
export interface MetricsConfig {
  metrics_path: string;
}

/** `#/definitions/InstanceInfo` (GET /). */
export interface InstanceInfo {
  app_name: string;
  id: string;
  state: "Not started" | "Running" | "Paused";
  vmm_version: string;
}
