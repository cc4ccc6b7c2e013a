/*
 * config_schema.c — the one schema table of zrt's config (DESIGN.md rule 7):
 * every key users write (DeepSpeed JSON keys, zrt's own `zrt:` section, the
 * accelerate-style launch keys), with type, DeepSpeed's default, range or
 * choices, environment variable, doc line and the zrt_cfg field it fills.
 * Also the list of DeepSpeed / accelerate keys zrt accepts but does not act
 * on, and the markdown reference generated from the table.
 *
 * Invariants: rows are grouped by section in the order the reference shows
 * them; defaults are text parsed by the same code as file values, so a
 * default can never be something a file could not say.
 */
#include <stddef.h>
#include <string.h>

#include "config_impl.h"

#define F(field) offsetof(zrt_cfg, field), sizeof(((zrt_cfg *)0)->field)
#define R(path, type, flags, def, choices, lo, hi, env, doc, field)                                \
  { {path, type, flags, def, choices, lo, hi, env, doc}, F(field), 0, NULL }
#define RE(path, flags, def, choices, evals, doc, field)                                           \
  { {path, ZRT_CFGT_ENUM, flags, def, choices, 1, 0, NULL, doc}, F(field), 0, evals }

#define B ZRT_CFGT_BOOL
#define I ZRT_CFGT_INT
#define D ZRT_CFGT_FLOAT
#define S ZRT_CFGT_STRING
#define A ZRT_CFGK_AUTO
#define L ZRT_CFGK_LAUNCH
#define Z ZRT_CFGK_ZRT
#define NC ZRT_CFGK_NOCASE
#define BIG 9.2e18

static const int comm_dtype_vals[] = {ZRT_F32, ZRT_F16, ZRT_BF16, -1};
static const int offload_vals[] = {ZRT_OFFLOAD_NONE, ZRT_OFFLOAD_CPU, ZRT_OFFLOAD_NVME};
static const int optim_vals[] = {ZRT_OPTIM_ADAM, ZRT_OPTIM_ADAMW, ZRT_OPTIM_SGD, ZRT_OPTIM_LION};
static const int sched_vals[] = {ZRT_SCHED_NONE, ZRT_SCHED_WARMUP_LR, ZRT_SCHED_WARMUP_DECAY_LR,
                                 ZRT_SCHED_WARMUP_COSINE_LR};
static const int wtype_vals[] = {1, 0};

#define OFFLOAD(sec, fld, bc)                                                                      \
  RE("zero_optimization." sec ".device", NC, "none", "none|cpu|nvme", offload_vals,                \
     "where the " sec " shards live: none, cpu (NUMA-pinned host memory) or nvme (swap files)",    \
     fld.device),                                                                                  \
      R("zero_optimization." sec ".nvme_path", S, 0, "", NULL, 1, 0, NULL,                         \
        "directory of the swap files when device is nvme", fld.nvme_path),                         \
      R("zero_optimization." sec ".pin_memory", B, 0, "false", NULL, 1, 0, NULL,                   \
        "page-lock the host buffers (faster transfers)", fld.pin_memory),                          \
      R("zero_optimization." sec ".buffer_count", I, 0, bc, NULL, 0, 1e6, NULL,                    \
        "number of host/NVMe staging buffers in the transfer pipeline", fld.buffer_count)

const zrt_cfg_row zrt_cfg_rows[] = {
    /* ------------------------------------------------------ batch and top level */
    R("train_batch_size", I, A, NULL, NULL, 1, BIG, NULL,
      "global batch per optimizer step = micro * accumulation * world size", train_batch_size),
    R("train_micro_batch_size_per_gpu", I, A, NULL, NULL, 1, BIG, NULL,
      "samples per rank per forward/backward", train_micro_batch_size_per_gpu),
    R("gradient_accumulation_steps", I, A, NULL, NULL, 1, BIG, NULL,
      "micro-batches accumulated before each optimizer step", gradient_accumulation_steps),
    R("gradient_clipping", D, A, "0", NULL, 0, 1e30, NULL,
      "clip the global gradient norm to this value (0 = off)", gradient_clipping),
    R("steps_per_print", I, 0, "10", NULL, 0, BIG, NULL,
      "log progress every N optimizer steps (0 = never: a program printing its own progress "
      "line sets it)",
      steps_per_print),
    R("wall_clock_breakdown", B, 0, "false", NULL, 1, 0, NULL,
      "log the step breakdown (zrt_step_timing: other/forward/backward/boundary, fetch, reduce, "
      "optimizer, gather, comm hidden) on rank 0 every steps_per_print steps; the metrics record "
      "has it always",
      wall_clock_breakdown),
    /* DeepSpeed's monitor backends, written by engine/monitor.c on rank 0 */
    R("tensorboard.enabled", B, 0, "false", NULL, 1, 0, NULL,
      "write TensorBoard event files (Train/Samples/train_loss, lr, loss_scale with fp16; x "
      "axis: samples seen) into output_path/job_name",
      tb_enabled),
    R("tensorboard.output_path", S, 0, "", NULL, 1, 0, NULL,
      "directory of the job directories (empty = the working directory)", tb_output_path),
    R("tensorboard.job_name", S, 0, "DeepSpeedJobName", NULL, 1, 0, NULL,
      "sub-directory of output_path for this run", tb_job_name),
    R("csv_monitor.enabled", B, 0, "false", NULL, 1, 0, NULL,
      "write the same scalars as CSV files, one per tag (\"/\" -> \"_\"), into "
      "output_path/job_name",
      csv_enabled),
    R("csv_monitor.output_path", S, 0, "", NULL, 1, 0, NULL,
      "directory of the job directories (empty = the working directory)", csv_output_path),
    R("csv_monitor.job_name", S, 0, "DeepSpeedJobName", NULL, 1, 0, NULL,
      "sub-directory of output_path for this run", csv_job_name),
    RE("communication_data_type", NC, "null", "fp32|fp16|bf16|null", comm_dtype_vals,
       "dtype of gradient reductions (null = the working dtype)", communication_data_type),

    /* ------------------------------------------------------------------ fp16 */
    R("fp16.enabled", B, A, "false", NULL, 1, 0, NULL,
      "train in fp16 with fp32 master weights and dynamic loss scaling", fp16_enabled),
    R("fp16.loss_scale", D, 0, "0", NULL, 0, 1e38, NULL, "static loss scale (0 = dynamic)",
      fp16_loss_scale),
    R("fp16.initial_scale_power", I, 0, "16", NULL, 0, 126, NULL,
      "dynamic scaling starts at 2^initial_scale_power", fp16_initial_scale_power),
    R("fp16.loss_scale_window", I, 0, "1000", NULL, 1, BIG, NULL,
      "overflow-free steps before the scale doubles", fp16_loss_scale_window),
    R("fp16.hysteresis", I, 0, "2", NULL, 1, BIG, NULL,
      "overflows tolerated before the scale halves", fp16_hysteresis),
    R("fp16.consecutive_hysteresis", B, 0, "false", NULL, 1, 0, NULL,
      "refill hysteresis after every overflow-free step", fp16_consecutive_hysteresis),
    R("fp16.min_loss_scale", D, 0, "1", NULL, 1e-38, 1e38, NULL,
      "smallest dynamic loss scale; overflow there is an error", fp16_min_loss_scale),

    /* ------------------------------------------------------------------ bf16 */
    R("bf16.enabled", B, A, "false", NULL, 1, 0, NULL,
      "train in bf16 with fp32 master weights (section also spelled bfloat16)", bf16_enabled),
    R("bf16.check_grad_overflow", B, 0, "true", NULL, 1, 0, NULL,
      "check bf16 gradients for inf/nan and skip such steps (DeepSpeed's default since PR #6976; "
      "false applies them, and zrt.stop_on_nonfinite then stops the run)",
      bf16_check_grad_overflow),
    R("bf16.bf16_master_weights_and_grads", B, 0, "false", NULL, 1, 0, NULL,
      "keep the master weights and the reduced-gradient partitions in bf16 instead of fp32 "
      "(DeepSpeed's low-precision master weights: 2 bytes per element each instead of 4; "
      "rounded to nearest even after every update). Needs bf16.enabled, zero_optimization.stage "
      "1-3 and, in zrt, offload_optimizer device cpu with an Adam/AdamW optimizer",
      bf16_master_weights_and_grads),
    R("bf16.bf16_optimizer_states", B, 0, "false", NULL, 1, 0, NULL,
      "keep the optimizer moments (Adam's exp_avg and exp_avg_sq) in bf16 as well: with "
      "bf16_master_weights_and_grads, 6 bytes of host memory per element of the rank's "
      "partition instead of 10",
      bf16_optimizer_states),

    /* ----------------------------------------------------- zero_optimization */
    R("zero_optimization.stage", I, A, "0", NULL, 0, 3, NULL,
      "ZeRO stage: 0 none, 1 optimizer states, 2 + gradients, 3 + parameters (auto: the engine "
      "picks)",
      zero_stage),
    R("zero_optimization.contiguous_gradients", B, 0, "true", NULL, 1, 0, NULL,
      "copy gradients into one contiguous buffer as they are produced", contiguous_gradients),
    R("zero_optimization.overlap_comm", B, 0, "false", NULL, 1, 0, NULL,
      "overlap gradient reduction with backward (DeepSpeed turns it on for stage 3)", overlap_comm),
    R("zero_optimization.reduce_scatter", B, 0, "true", NULL, 1, 0, NULL,
      "reduce gradients with reduce-scatter instead of all-reduce", reduce_scatter),
    R("zero_optimization.reduce_bucket_size", I, A, "5e8", NULL, 0, BIG, NULL,
      "elements reduced at a time", reduce_bucket_size),
    R("zero_optimization.allgather_bucket_size", I, 0, "5e8", NULL, 0, BIG, NULL,
      "elements all-gathered at a time (stage 1/2)", allgather_bucket_size),
    R("zero_optimization.stage3_prefetch_bucket_size", I, A, "5e7", NULL, 0, BIG, NULL,
      "elements of parameters prefetched ahead (stage 3)", stage3_prefetch_bucket_size),
    R("zero_optimization.stage3_param_persistence_threshold", I, A, "1e5", NULL, 0, BIG, NULL,
      "parameters smaller than this stay gathered (stage 3)", stage3_param_persistence_threshold),
    R("zero_optimization.stage3_max_live_parameters", I, 0, "1e9", NULL, 0, BIG, NULL,
      "most gathered parameter elements alive at once (stage 3)", stage3_max_live_parameters),
    R("zero_optimization.stage3_max_reuse_distance", I, 0, "1e9", NULL, 0, BIG, NULL,
      "keep a released module gathered when it is fetched again within this many elements of "
      "other modules' fetches (stage 3; within stage3_max_live_parameters; 0 = gather every use)",
      stage3_max_reuse_distance),
    R("zero_optimization.sub_group_size", I, 0, "1e9", NULL, 0, BIG, NULL,
      "elements per optimizer sub-group: caps the offloaded optimizer step's tile, and groups "
      "modules (per-rank elements accumulated to >= this) for offload_optimizer.ratio",
      sub_group_size),
    OFFLOAD("offload_optimizer", offload_optimizer, "4"),
    R("zero_optimization.offload_optimizer.ratio", D, 0, "1", NULL, 0, 1, NULL,
      "Twin-Flow (stage 3, device cpu): the share of the optimizer sub-groups (modules grouped "
      "by sub_group_size) stepped on the CPU from host memory, the last ones; the first "
      "int((1 - ratio) * groups) stay on the device (0 = no optimizer offload). Ignored at "
      "stages 1-2, as in DeepSpeed",
      offload_optimizer.ratio),
    OFFLOAD("offload_param", offload_param, "5"),
    R("zero_optimization.offload_param.buffer_size", I, 0, "1e8", NULL, 0, BIG, NULL,
      "device nvme: caps the host staging buffer of the param swap file (fp32 elements; "
      "min(offload tile, buffer_size) rounded up to 2048)",
      offload_param.buffer_size),
    R("zero_optimization.offload_param.max_in_cpu", I, 0, "1e9", NULL, 0, BIG, NULL,
      "accepted for DeepSpeed compatibility, not used: with device nvme the host keeps only "
      "the staging buffer, never parameter shards",
      offload_param.max_in_cpu),

    /* ------------------------------------------- activation_checkpointing (ZeRO-R) */
    R("activation_checkpointing.partition_activations", B, 0, "false", NULL, 1, 0, NULL,
      "accepted, not acted on: DeepSpeed splits each checkpoint across the tensor-parallel "
      "ranks, and zrt has no tensor parallelism (every rank keeps its whole checkpoints; true is "
      "warned)",
      actckpt_partition),
    R("activation_checkpointing.cpu_checkpointing", B, 0, "false", NULL, 1, 0, NULL,
      "keep the checkpoints in pinned host memory: each copied out on a copy stream as the "
      "forward saves it, prefetched back in backward order one block ahead (two device staging "
      "slots)",
      actckpt_cpu),
    R("activation_checkpointing.contiguous_memory_optimization", B, 0, "false", NULL, 1, 0, NULL,
      "hold every checkpoint in one preallocated buffer instead of one allocation per block",
      actckpt_contiguous),
    R("activation_checkpointing.number_checkpoints", I, 0, NULL, NULL, 0, 1e9, NULL,
      "checkpoint at most this many blocks, the first ones the program offers (null: every "
      "offered block)",
      actckpt_number),
    R("activation_checkpointing.synchronize_checkpoint_boundary", B, 0, "false", NULL, 1, 0, NULL,
      "synchronize the device when a checkpointed block's forward starts (its save) and when its "
      "backward starts and ends (fetch, release), as DeepSpeed does around each checkpoint",
      actckpt_sync),
    R("activation_checkpointing.profile", B, 0, "false", NULL, 1, 0, NULL,
      "log the forward and backward (recompute included) time of every checkpointed block, "
      "device synchronized, on rank 0",
      actckpt_profile),

    /* ------------------------------------------------------------- optimizer */
    RE("optimizer.type", NC, "Adam", "Adam|AdamW|SGD|Lion", optim_vals,
       "optimizer (case-insensitive; Adam means AdamW unless adam_w_mode is false, as in "
       "DeepSpeed); zrt uses Adam when the section is absent",
       optimizer_type),
    R("optimizer.params.lr", D, A, "1e-3", NULL, 0, 1e30, NULL, "learning rate", lr),
    {{"optimizer.params.betas", ZRT_CFGT_PAIR, A, "[0.9, 0.999]", NULL, 0, 1, NULL,
      "Adam/AdamW/Lion coefficients [beta1, beta2]"},
     offsetof(zrt_cfg, beta1),
     sizeof(double),
     offsetof(zrt_cfg, beta2),
     NULL},
    R("optimizer.params.eps", D, A, "1e-8", NULL, 0, 1, NULL, "Adam/AdamW denominator epsilon",
      eps),
    R("optimizer.params.weight_decay", D, A, "0", NULL, 0, 1e30, NULL,
      "weight decay (AdamW, Adam in adam_w_mode, Lion: decoupled; Adam with adam_w_mode false, "
      "SGD: L2 on the gradient)",
      weight_decay),
    R("optimizer.params.momentum", D, 0, "0", NULL, 0, 1, NULL, "SGD momentum", momentum),
    R("optimizer.params.bias_correction", B, 0, "true", NULL, 1, 0, NULL,
      "Adam/AdamW bias correction", bias_correction),
    R("optimizer.params.adam_w_mode", B, 0, "true", NULL, 1, 0, NULL,
      "type Adam runs AdamW (decoupled weight decay) unless this is false, as in DeepSpeed",
      adam_w_mode),

    /* ------------------------------------------------------------- scheduler */
    RE("scheduler.type", 0, "none", "none|WarmupLR|WarmupDecayLR|WarmupCosineLR", sched_vals,
       "learning-rate schedule (none = constant lr)", scheduler_type),
    R("scheduler.params.warmup_min_lr", D, A, "0", NULL, 0, 1e30, NULL,
      "lr at step 0 (WarmupLR, WarmupDecayLR)", warmup_min_lr),
    R("scheduler.params.warmup_max_lr", D, A, "1e-3", NULL, 0, 1e30, NULL,
      "lr at the end of warmup (WarmupLR, WarmupDecayLR)", warmup_max_lr),
    R("scheduler.params.warmup_num_steps", I, A, "1000", NULL, 0, BIG, NULL,
      "optimizer steps of warmup", warmup_num_steps),
    RE("scheduler.params.warmup_type", 0, "log", "log|linear", wtype_vals,
       "warmup curve: log or linear", warmup_type_log),
    R("scheduler.params.total_num_steps", I, A, NULL, NULL, 1, BIG, NULL,
      "optimizer steps of the whole run (WarmupDecayLR, WarmupCosineLR)", total_num_steps),
    R("scheduler.params.cos_min_ratio", D, 0, "1e-4", NULL, 0, 1, NULL,
      "final lr / peak lr of the cosine decay (WarmupCosineLR)", cos_min_ratio),
    R("scheduler.params.warmup_min_ratio", D, 0, "0", NULL, 0, 1, NULL,
      "lr / peak lr at step 0 (WarmupCosineLR)", warmup_min_ratio),

    /* ------------------------------------------------------------ zrt section */
    {{"zrt.device_memory_limit", ZRT_CFGT_SIZE, Z, "0", NULL, 0, 1.8e19, "ZRT_DEVICE_MEMORY_LIMIT",
      "device pool capacity: bytes or 24MiB / 1.5GB (0 = this rank's share of the device's free "
      "memory)"},
     F(device_memory_limit),
     0,
     NULL},
    R("zrt.seed", I, Z, "42", NULL, 0, BIG, "ZRT_SEED", "seed of parameter init and dropout", seed),
    R("zrt.metrics_path", S, Z, "", NULL, 1, 0, "ZRT_METRICS_PATH",
      "JSON-lines file of per-step metrics (empty = none)", metrics_path),
    R("zrt.comm_timeout_s", D, Z, "1800", NULL, 1e-3, 1e9, "ZRT_COMM_TIMEOUT_S",
      "seconds a collective may take before the comm reports a hang", comm_timeout_s),
    {{"zrt.backend", ZRT_CFGT_ENUM, Z | NC, "auto", "auto|cpu|twin|cuda", 1, 0, "ZRT_BACKEND",
      "compute backend (auto: cuda when built and a GPU is present; cpu when there is no GPU, "
      "and cpu with a warning carrying CUDA's message on a driver problem; twin: the cpu's "
      "numerics with a GPU's streams, events and device memory the host cannot touch, "
      "for checking the GPU's rules without one)"},
     F(backend),
     0,
     NULL},
    {{"zrt.comm", ZRT_CFGT_ENUM, Z | NC, "auto", "auto|self|mpi|shm|hier|nccl", 1, 0, "ZRT_COMM",
      "collectives (auto: nccl on GPU; on CPU shm — shared memory — when all ranks are on one "
      "machine, hier — shared memory within each machine, MPI across — when every machine "
      "holds the same number (> 1) of contiguous ranks, else mpi; self at world size 1). mpi "
      "turns shared memory off"},
     F(comm),
     0,
     NULL},
    R("zrt.numa_node", I, Z, "-1", NULL, -1, 1023, "ZRT_NUMA_NODE",
      "NUMA node of host buffers (-1 = the node local to the rank's device)", numa_node),
    R("zrt.blas_threads", I, Z, "0", NULL, 0, 4096, "ZRT_BLAS_THREADS",
      "OpenBLAS threads of the CPU backend's GEMM (0 = OpenBLAS's own default); a program that "
      "splits its GEMMs over its OpenMP team sets 1 so two thread pools do not fight for the "
      "cores",
      blas_threads),
    R("zrt.adaptive_threads", B, Z, "true", NULL, 1, 0, "ZRT_ADAPTIVE_THREADS",
      "the rank's OpenMP team follows measured step times: one thread fewer while another "
      "process takes a core (each step would wait for the thread that shares it), back when it "
      "is free; probes a neighbouring size for 3 steps every 8-128 steps; changes no bits",
      adaptive_threads),
    R("zrt.bind_cores_to_rank", B, Z, "false", NULL, 1, 0, "ZRT_BIND_CORES_TO_RANK",
      "pin each rank's threads to its share of the cores", bind_cores_to_rank),
    R("zrt.pin_memory_fallback", B, Z, "true", NULL, 1, 0, "ZRT_PIN_MEMORY_FALLBACK",
      "use unpinned host memory (logged) when page-locking fails", pin_memory_fallback),
    R("zrt.activation_checkpointing", B, Z, "false", NULL, 1, 0, "ZRT_ACTIVATION_CHECKPOINTING",
      "checkpoint the blocks the program offers (zrt_actckpt_declare): set by the presence of "
      "DeepSpeed's activation_checkpointing section, or by the program (zrt_config_set, e.g. "
      "from its own activation-checkpointing option)",
      activation_checkpointing),
    R("zrt.stop_on_nonfinite", B, Z, "true", NULL, 1, 0, "ZRT_STOP_ON_NONFINITE",
      "stop the run (ZRT_ERR_OVERFLOW) when the loss is not finite or non-finite gradients were "
      "applied to the master weights; false logs it with the step and goes on",
      stop_on_nonfinite),

    /* ------------------------------------------------------------ launch keys */
    RE("compute_environment", L, "LOCAL_MACHINE", "LOCAL_MACHINE", NULL,
       "accelerate's compute environment (zrt launches on local machines / hostfiles)",
       compute_environment),
    RE("distributed_type", L, "DEEPSPEED", "DEEPSPEED|MULTI_GPU|MULTI_CPU|NO|FSDP", NULL,
       "accelerate's distributed type; zrt runs every one as DeepSpeed-style ZeRO (FSDP: its "
       "fsdp_config as the ZeRO equivalent)",
       distributed_type),
    R("num_processes", I, L, "1", NULL, 1, 1e6, NULL, "ranks in total over all machines",
      num_processes),
    R("num_machines", I, L, "1", NULL, 1, 1e5, NULL, "machines (hosts)", num_machines),
    R("machine_rank", I, L, "0", NULL, 0, 1e5, NULL, "index of this machine", machine_rank),
    R("main_process_ip", S, L, "", NULL, 1, 0, NULL, "address of machine 0 (multi-machine)",
      main_process_ip),
    R("main_process_port", I, L, "29500", NULL, 0, 65535, NULL, "port on machine 0",
      main_process_port),
    R("hostfile", S, L, "", NULL, 1, 0, NULL,
      "hostfile (\"host slots=N\" lines) for mpiexec across machines", hostfile),
    RE("mixed_precision", L | NC, "no", "no|fp16|bf16", NULL,
       "sets fp16.enabled / bf16.enabled (launch YAML)", mixed_precision),
    R("use_cpu", B, L, "false", NULL, 1, 0, NULL, "force the CPU backend", use_cpu),
};

const size_t zrt_cfg_nrows = sizeof zrt_cfg_rows / sizeof zrt_cfg_rows[0];

_Static_assert(sizeof zrt_cfg_rows / sizeof zrt_cfg_rows[0] <= ZRT_CFG_MAXKEYS,
               "raise ZRT_CFG_MAXKEYS");

/* Keys DeepSpeed or accelerate define that zrt accepts and ignores (with
 * one warning naming them). A name ending in ".*" covers its sub-tree; a
 * bare section name covers the section. */
const char *const zrt_cfg_ignored[] = {
    /* DeepSpeed top level (runtime/config.py's DeepSpeedConfig._initialize_params and the
     * sections it hands to sub-configs, one by one) */
    "comms_logger", "eigenvalue", "dataloader_drop_last", "vocabulary_size",
    "use_data_before_expert_parallelism", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "flops_profiler", "wandb", "comet", "monitor_config",
    "elasticity", "aio", "dump_state", "prescale_gradients", "gradient_predivide_factor",
    "sparse_gradients", "memory_breakdown", "checkpoint", "data_types", "autotuning",
    "communication_data_type_reduce", "seq_parallel_communication_data_type", "disable_allgather",
    "load_universal_checkpoint", "use_node_local_storage", "graph_harvesting", "nebula", "timers",
    "weight_quantization", "compile", "fp16.auto_cast",
    "bf16.immediate_grad_update", /* zero_optimization */
    "zero_optimization.round_robin_gradients", "zero_optimization.load_from_fp32_weights",
    "zero_optimization.elastic_checkpoint", "zero_optimization.ignore_unused_parameters",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save",
    "zero_optimization.stage3_gather_fp16_weights_on_model_save",
    "zero_optimization.cpu_offload_use_pin_memory", "zero_optimization.allgather_partitions",
    "zero_optimization.mics_hierarchical_params_gather",
    "zero_optimization.memory_efficient_linear",
    "zero_optimization.use_multi_rank_bucket_allreduce", "zero_optimization.legacy_stage1",
    "zero_optimization.stage3_module_granularity_threshold",
    "zero_optimization.pipeline_loading_checkpoint", "zero_optimization.override_module_apply",
    "zero_optimization.log_trace_cache_warnings", "zero_optimization.offload_optimizer.fast_init",
    "zero_optimization.offload_optimizer.pipeline",
    "zero_optimization.offload_optimizer.pipeline_read",
    "zero_optimization.offload_optimizer.pipeline_write",
    /* DeepSpeedZeroConfig fields by name and by alias (populate_by_name),
     * DeepSpeedZeroOffloadOptimizerConfig extras */
    "zero_optimization.gather_16bit_weights_on_model_save",
    "zero_optimization.model_persistence_threshold",
    "zero_optimization.stage3_model_persistence_threshold",
    "zero_optimization.module_granularity_threshold",
    "zero_optimization.use_all_reduce_for_fetch_params",
    "zero_optimization.stage3_use_all_reduce_for_fetch_params",
    "zero_optimization.allgather_sequential", "zero_optimization.stage3_allgather_sequential",
    "zero_optimization.partition_stream_chunk_size",
    "zero_optimization.stage3_partition_stream_chunk_size", "zero_optimization.zeropp_loco_param",
    "zero_optimization.enable_sanity_checks",
    "zero_optimization.save_muon_momentum_buffer_in_memory", "zero_optimization.leaf_module",
    "zero_optimization.offload_optimizer.convert_grad_on_cpu",
    "zero_optimization.offload_optimizer.cpuadam_cores_perc",
    /* optimizer / scheduler extras */
    "optimizer.params.torch_adam", "optimizer.params.amsgrad", "optimizer.params.fused",
    "optimizer.legacy_fusion", "scheduler.params.last_batch_iteration",
    /* accelerate launch keys */
    "debug", "downcast_bf16", "enable_cpu_affinity", "rdzv_backend", "same_network", "tpu_env",
    "tpu_use_cluster", "tpu_use_sudo", "tpu_name", "tpu_zone", "tpu_vm", "tpu_config", "commands",
    "command_file", "main_training_function", "gpu_ids", "dynamo_config", "dynamo_backend",
    "megatron_lm_config", "ipex_config", "mpirun_config.mpirun_ccl", "num_cpu_threads_per_process",
    "use_mps_device", "mixed_precision_config", "fp8_config", "parallelism_config",
    /* accelerate deepspeed_config short names without a zrt meaning */
    "deepspeed_config.zero3_init_flag", "deepspeed_config.zero3_save_16bit_model",
    "deepspeed_config.deepspeed_multinode_launcher", "deepspeed_config.deepspeed_exclusion_filter",
    "deepspeed_config.deepspeed_inclusion_filter", "deepspeed_config.deepspeed_moe_layer_cls_names",
    NULL};

int zrt_config_is_ignored(const char *path) {
  for (size_t i = 0; zrt_cfg_ignored[i]; i++)
    if (!strcmp(zrt_cfg_ignored[i], path)) return 1;
  return 0;
}

size_t zrt_config_schema_count(void) { return zrt_cfg_nrows; }

const zrt_cfg_key *zrt_config_schema_key(size_t i) {
  return i < zrt_cfg_nrows ? &zrt_cfg_rows[i].k : NULL;
}

/* ------------------------------------------------------------ reference */

static const char *type_name(const zrt_cfg_key *k) {
  switch (k->type) {
  case ZRT_CFGT_BOOL: return "bool";
  case ZRT_CFGT_INT: return "integer";
  case ZRT_CFGT_FLOAT: return "number";
  case ZRT_CFGT_SIZE: return "size";
  case ZRT_CFGT_STRING: return "string";
  case ZRT_CFGT_ENUM: return "enum";
  case ZRT_CFGT_PAIR: return "[number, number]";
  }
  return "?";
}

static void md_cell(FILE *out, const char *s) {
  /* '|' inside a cell would split the table row */
  for (; *s; s++) {
    if (*s == '|')
      fputs("\\|", out);
    else
      fputc(*s, out);
  }
}

static void section_of(const char *path, char *buf, size_t len) {
  const char *dot = strrchr(path, '.');
  size_t n = dot ? (size_t)(dot - path) : 0;
  if (n >= len) n = len - 1;
  memcpy(buf, path, n);
  buf[n] = 0;
}

static const char *section_title(const zrt_cfg_key *k, const char *sec) {
  if (k->flags & ZRT_CFGK_LAUNCH) return "Launch keys (launch YAML, accelerate style)";
  if (!*sec) return "Top-level DeepSpeed keys";
  return NULL;
}

zrt_status zrt_config_write_reference(FILE *out) {
  if (!out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_write_reference: out is NULL");
  fputs("<!-- Generated by `zrt config reference` from config/config_schema.c; do not edit. -->\n"
        "# zrt config reference\n\n"
        "Every key zrt reads, one table per section. A key path `a.b.c` is written nested in\n"
        "JSON (`{\"a\": {\"b\": {\"c\": ...}}}`) and YAML alike. Types: `size` takes bytes or a\n"
        "unit (KiB, MiB, GiB, KB, MB, GB); `integer` also takes `5e8`; `auto` is accepted where\n"
        "the allowed column says so and resolved by `zrt_config_resolve`. See docs/config.md for\n"
        "precedence, launch YAML and error messages.\n",
        out);
  char cur[128] = "\x01";
  int cur_launch = -1;
  for (size_t i = 0; i < zrt_cfg_nrows; i++) {
    const zrt_cfg_key *k = &zrt_cfg_rows[i].k;
    char sec[128];
    section_of(k->path, sec, sizeof sec);
    int launch = !!(k->flags & ZRT_CFGK_LAUNCH);
    if (strcmp(sec, cur) || launch != cur_launch) {
      const char *t = section_title(k, sec);
      if (t)
        fprintf(out, "\n## %s\n\n", t);
      else
        fprintf(out, "\n## `%s`\n\n", sec);
      fputs("| key | type | default | allowed | env | description |\n"
            "| --- | --- | --- | --- | --- | --- |\n",
            out);
      snprintf(cur, sizeof cur, "%s", sec);
      cur_launch = launch;
    }
    fprintf(out, "| `%s` | %s | ", k->path, type_name(k));
    if (!k->def)
      fputs("(unset)", out);
    else if (!*k->def)
      fputs("\"\"", out);
    else {
      fputc('`', out);
      md_cell(out, k->def);
      fputc('`', out);
    }
    fputs(" | ", out);
    int any = 0;
    if (k->type == ZRT_CFGT_ENUM) {
      md_cell(out, k->choices);
      if (k->flags & ZRT_CFGK_NOCASE) fputs(" (any case)", out);
      any = 1;
    } else if (k->type == ZRT_CFGT_BOOL) {
      fputs("true, false", out);
      any = 1;
    } else if (k->min <= k->max) {
      if (k->max >= 9e18)
        fprintf(out, ">= %g", k->min);
      else
        fprintf(out, "%g .. %g", k->min, k->max);
      any = 1;
    }
    if (k->flags & ZRT_CFGK_AUTO) fputs(any ? ", `auto`" : "`auto`", out);
    fprintf(out, " | %s | ", k->env ? k->env : "");
    md_cell(out, k->doc);
    fputs(" |\n", out);
  }
  fputs("\n## Accepted but not used by zrt\n\n"
        "These DeepSpeed / accelerate keys load without error; zrt logs one warning naming\n"
        "the ones a file sets. Their sub-keys are not checked.\n\n",
        out);
  for (size_t i = 0; zrt_cfg_ignored[i]; i++)
    fprintf(out, "%s`%s`", i ? ", " : "", zrt_cfg_ignored[i]);
  fputs("\n", out);
  if (ferror(out)) return zrt_error(ZRT_ERR_IO, "writing the config reference failed");
  return ZRT_OK;
}
