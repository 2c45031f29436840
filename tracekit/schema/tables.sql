-- tables.sql: the base tables of the tracekit store, as a new store of the current schema creates
-- them (tracekit.store.ensure_schema). The parsers write them; everything else reads the views of
-- views.sql. Times are integer nanoseconds on the trace's own clock. Above each column, a comment
-- says what it holds, starting with [unit] when it has one; docs/schema.md is generated from these
-- comments (`python -m tracekit.schema`). A change here needs a migration step (migrate_*.sql) and a
-- new tracekit.store.SCHEMA_VERSION.

-- One row per schema version the store reached: written when the store is created and by each migration
-- step. The store's version is `max(version)`.
CREATE TABLE tracekit_schema (
    -- the schema version reached (`tracekit.store.SCHEMA_VERSION` of the code that wrote the row)
    version         INTEGER NOT NULL,
    -- [UTC] when the store was created at, or migrated to, this version
    migrated_at     TIMESTAMP NOT NULL
);

-- One row per run: one PATH given to `tracekit ingest` (view `runs`).
CREATE TABLE run_meta (
    -- the run (`runs.run_id`)
    run_id          VARCHAR PRIMARY KEY,
    -- one file: SHA-256 of its bytes as stored on disk (the `.gz` bytes for a `.json.gz` or
    -- `.xplane.pb.gz`). Several files: SHA-256 of their sorted hex digests joined by `\n`. Unique in the
    -- store, so re-ingesting the same content returns the existing run
    content_sha256  VARCHAR NOT NULL UNIQUE,
    -- the PATH as given to `ingest` (relative paths stay relative)
    source          VARCHAR NOT NULL,
    -- `kineto` | `xplane` | `rocpd` | `rpd` | `rocprofv3` (rocprofv3 CSV or JSON) | `nsys`
    format          VARCHAR NOT NULL,
    -- `nvidia` | `amd` | `google` (TPU) | `other` | `cpu`, see below
    vendor          VARCHAR NOT NULL,
    -- name of the device chosen below (`devices.name`). NULL when that device has no name (empty in the
    -- trace, e.g. some MI300X traces) or no device is listed. `'CPU'` for CPU-only runs; `'CPU (XLA)'` for
    -- a CPU-only XLA capture. XPlane examples: `TPU v6 Lite`, `NVIDIA GPU (sm_70, 80 SMs)`, `AMD GPU
    -- (compute capability 9.4, 304 CUs)`. AMD formats: `AMD Instinct MI300X` (the agent's product name),
    -- `AMD GPU (RPD gpuId 2)`; NULL for a rocprofv3 CSV run without `agent_info.csv` (see
    -- [devices](#devices))
    device_name     VARCHAR,
    -- `--label` (free text, e.g. a git sha)
    label           VARCHAR,
    -- `--workload`
    workload        VARCHAR,
    -- [UTC] see [Time base](#time-base)
    captured_at     TIMESTAMP,
    -- [UTC] when the run was written
    ingested_at     TIMESTAMP NOT NULL,
    -- `--tag KEY=VALUE` pairs
    tags            MAP(VARCHAR, VARCHAR),
    -- [count] trace files in the run
    n_files         INTEGER NOT NULL,
    -- [count] distinct ranks
    n_ranks         INTEGER NOT NULL,
    -- [bytes] sum of on-disk file sizes
    input_bytes     BIGINT NOT NULL,
    -- [count] Kineto: all entries of every `traceEvents` array. XPlane: all events on the lines of every
    -- plane except `/host:metadata` and `Task Environment` (aggregated events included). AMD: records read,
    -- see `ranks.n_trace_events` (counter values are not counted)
    n_trace_events  BIGINT NOT NULL,
    -- [count] `n_trace_events` minus the rows stored (in `device_activity` and `host_events`), equal to Σ
    -- over ranks of `n_python_events + n_flow_events + n_other_skipped + n_invalid_events` (see [What is
    -- not stored](#what-is-not-stored))
    n_skipped_events BIGINT NOT NULL,
    -- version of tracekit that ingested the run
    tracekit_version VARCHAR NOT NULL,
    -- [count] events read but not stored because they cannot be right: Σ over ranks of
    -- `ranks.n_invalid_events`. The ingest prints a `warning:` line when it is not 0. 0 for runs stored
    -- before schema 4
    n_invalid_events BIGINT DEFAULT 0,
    -- [count] rows of `device_activity` of the run (a rollup written at ingest, so the run list reads
    -- no event rows). NULL only for a run a tracekit older than schema 5 wrote into a lake
    n_device_events BIGINT,
    -- [count] rows of `host_events` of the run (rollup, as `n_device_events`)
    n_host_events   BIGINT,
    -- [ns] Σ `dur_ns` over the run's `device_activity` (rollup, as `n_device_events`): activities that
    -- overlap count each, so this is not busy time
    device_time_ns  BIGINT,
    -- the run's main device, which the analyzers cost against and the dashboard names (view
    -- `run_main_device`): of the `devices` listed, the one with the most `device_activity` rows (ties:
    -- lowest rank, then device). Its rank; NULL when the run lists no device (rollup, as
    -- `n_device_events`)
    main_rank       INTEGER,
    -- the main device's `devices.device` (rollup, as `main_rank`)
    main_device     INTEGER
);

-- One row per rank of a run: a trace file (Kineto), a host (XPlane) or a profiled process (AMD formats)
-- (view `ranks`).
CREATE TABLE rank_meta (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- rank as assigned below
    rank            INTEGER NOT NULL,
    -- [count] `distributedInfo.world_size`. NULL for XPlane and AMD formats
    world_size      INTEGER,
    -- `distributedInfo.backend` (e.g. `nccl`). NULL for XPlane and AMD formats
    dist_backend    VARCHAR,
    -- `distributedInfo` | `file name` | `file order` | `single file` (Kineto) | `host` (XPlane) | `process`
    -- (AMD formats)
    rank_source     VARCHAR NOT NULL,
    -- XPlane: the XSpace's first `hostnames` entry (e.g. `34.83.195.179:6003`), else the file name without
    -- `.xplane.pb`/`.xplane.pb.gz` (e.g. `tpu_inference_2`). rocpd: `rocpd_info_node.hostname`; JSON:
    -- `metadata.node.hostname`. NULL for Kineto, CSV and RPD
    host            VARCHAR,
    -- file path (as found under the ingested PATH). CSV: the process's `kernel_trace` file (else its API,
    -- else its counter file)
    path            VARCHAR NOT NULL,
    -- SHA-256 of the bytes on disk of the file in `path` (CSV: that one file, not all files of the prefix)
    file_sha256     VARCHAR NOT NULL,
    -- the trace's own `schemaVersion` (Kineto's, not tracekit's). rocpd: the major of `schema_version`
    -- (3; the full text is in `trace_metadata.schema_version`); RPD: `rocpd_metadata.schema_version` (2). NULL
    -- for XPlane and rocprofv3 CSV/JSON
    schema_version  INTEGER,
    -- `trace_id`. rocpd: the process's `guid`. NULL for XPlane, CSV, JSON and RPD
    trace_id        VARCHAR,
    -- [ns since Unix epoch] Kineto: `baseTimeNanoseconds`. XPlane: the session start, the `Task
    -- Environment` plane's `profile_start_time` (exact integer Unix ns; NULL without that plane). NULL for
    -- AMD formats. Unix time = `start_ns + base_time_ns`, see [Time base](#time-base)
    base_time_ns    BIGINT,
    -- `displayTimeUnit` (informative only). NULL for XPlane and AMD formats
    display_time_unit VARCHAR,
    -- Kineto: `hip` if `hip_runtime_version`/`roctracer_version` is present, else `cuda` if
    -- `cuda_runtime_version`/`cupti_version` is present; without such metadata, `hip` if any `runtime` call
    -- is named `hip*`, else `cuda` if any `runtime`/`driver` call is named `cu*` (which covers `cuda*`),
    -- else NULL. XPlane: always `xla`. AMD formats: always `hip`
    runtime         VARCHAR,
    -- `hip_runtime_version` (runtime `hip`) or `cuda_runtime_version` (runtime `cuda`); NULL when that key
    -- is absent, e.g. when the runtime was inferred from call names. NULL for XPlane and AMD formats
    runtime_version VARCHAR,
    -- Kineto: all top-level keys except `traceEvents`. XPlane and AMD: see [JSON
    -- columns](#json-text-and-json-columns)
    trace_metadata  JSON,
    -- [count] Kineto: entries of `traceEvents`. XPlane: events on the lines of every plane except
    -- `/host:metadata` and `Task Environment`. rocpd: rows of `rocpd_kernel_dispatch`, `rocpd_memory_copy`,
    -- `rocpd_region`, `rocpd_memory_allocate` and `rocpd_sample`; CSV: data rows of the trace files
    -- (kernel, copy, API, memory-allocation, scratch and PC-sampling files; not `counter_collection`,
    -- `agent_info`, `*_stats`); JSON: all `buffer_records`; RPD: `rocpd_op` + `rocpd_api` rows of the
    -- process. Counter values are not events
    n_trace_events  BIGINT NOT NULL,
    -- [count] Kineto: `cat = python_function` events. XPlane: Python-tracer events, i.e. the events of a
    -- `/host:python-tracer` plane and host-plane events whose name starts with `$` (XLA's profiler merges
    -- the Python tracer into `/host:CPU` that way). Not stored, unless the run was ingested with
    -- `--python-events` (`python_events=True`): then they are `host_events` rows of category `python` and
    -- this count is 0
    n_python_events BIGINT NOT NULL,
    -- [count] flow events, `ph` ∈ `s`,`f`,`t` (not stored). 0 for XPlane and AMD formats
    n_flow_events   BIGINT NOT NULL,
    -- [count] everything else that was not stored. Kineto: instant (`i`) and metadata (`M`) events, other
    -- phases (an `X` event without `ts` is in `n_invalid_events`). XPlane and AMD: see [What is not
    -- stored](#what-is-not-stored)
    n_other_skipped BIGINT NOT NULL,
    -- [ns] min `start_ns` over the rank's stored device and host rows
    first_ns        BIGINT,
    -- [ns] max `end_ns` over the rank's stored device and host rows
    last_ns         BIGINT,
    -- [count] events of this rank read but dropped because physics forbids them: a negative duration (an
    -- end before its start, `device_dur_ns` too), a duration over a day (`tracekit.ingest.FAR_NS`), a stray
    -- time (the rank's events split where consecutive starts are over a day apart; a group with under 1 %
    -- of them, e.g. a start of `-1`), and records a parser drops itself (a CSV row cut by truncation, an
    -- exact duplicate CSV row, a rocpd row without an end, a Kineto event without `ts`). One SQL step after
    -- every parser (`tracekit.ingest.drop_impossible_events`); see [docs/security.md](security.md)
    n_invalid_events BIGINT DEFAULT 0
);

-- One row per device of a rank: a `deviceProperties` entry, an XPlane device plane or an AMD GPU agent
-- (view `devices`).
CREATE TABLE device_meta (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- the rank within the run (`ranks.rank`)
    rank            INTEGER NOT NULL,
    -- `id` (else the entry's 0-based position among that rank's entries)
    device          INTEGER NOT NULL,
    -- `name`, with surrounding whitespace removed. **NULL** when missing or empty (e.g. some MI300X traces
    -- write `""`)
    name            VARCHAR,
    -- `google` | `nvidia` | `amd` from the name, else from the rank's runtime, else `other` for any other
    -- name; NULL with neither a name nor a runtime (see [runs](#runs)). XPlane: from the plane
    -- (below); `cpu` for the CPU (XLA) device
    vendor          VARCHAR,
    -- `sm_{computeMajor}{computeMinor}` for NVIDIA (e.g. `sm_80`). **NULL for AMD** Kineto devices: HIP's
    -- major/minor do not name the gfx target (MI250 reports 9.0 for gfx90a). AMD formats: the gfx target
    -- (`gfx942`)
    arch            VARCHAR,
    -- [count] `numSms`: SMs on NVIDIA, **CUs on AMD** (MI300X: 304)
    compute_units   INTEGER,
    -- [threads] `warpSize`: 32 on NVIDIA, 64 on AMD CDNA
    warp_size       INTEGER,
    -- [bytes] `totalGlobalMem`
    memory_bytes    BIGINT,
    -- `computeMajor`
    compute_major   INTEGER,
    -- `computeMinor`
    compute_minor   INTEGER,
    -- [threads] `maxThreadsPerBlock`
    max_threads_per_block INTEGER,
    -- [threads] `maxThreadsPerMultiprocessor`
    max_threads_per_cu INTEGER,
    -- [registers] `regsPerBlock`
    regs_per_block  INTEGER,
    -- [registers] `regsPerMultiprocessor` (absent on AMD)
    regs_per_cu     INTEGER,
    -- [bytes] `sharedMemPerBlock`
    shared_mem_per_block_bytes BIGINT,
    -- [bytes] `sharedMemPerMultiprocessor`, else `maxSharedMemoryPerMultiProcessor` (AMD)
    shared_mem_per_cu_bytes BIGINT,
    -- [bytes] `sharedMemPerBlockOptin`
    shared_mem_per_block_optin_bytes BIGINT,
    -- XPlane: the plane's `device_type_string` stat (e.g. `TPU v6 Lite`); `CPU` for the CPU (XLA) device.
    -- AMD formats (rocpd, rocprofv3 CSV/JSON, RPD): `GPU`. NULL for Kineto
    device_type     VARCHAR,
    -- [MHz] XPlane: the plane's `clock_rate` stat (kHz) ÷ 1000 (GPU; V100: 1530). AMD: the agent's maximum
    -- engine clock. NULL for Kineto
    clock_mhz       DOUBLE,
    -- [TFLOP/s] XPlane only: the plane's `peak_teraflops_per_second` stat (TPU; v6e: 918)
    peak_tflops     DOUBLE,
    -- [GB/s (10⁹ B/s)] XPlane only: the plane's `peak_hbm_bw_gigabytes_per_second` stat, as the TPU plane
    -- states it (v6e: 1637.99). XProf converts it to GiB/s (2³⁰ B/s), in which the same peak is 1525.5
    peak_hbm_gbps   DOUBLE,
    -- [GB/s (10⁹ B/s)] XPlane only: the plane's `memory_bandwidth` stat (bytes/s) ÷ 10⁹ (GPU; V100:
    -- 898.048)
    memory_bandwidth_gbps DOUBLE,
    -- [count] AMD formats: XCDs (accelerator complex dies) of the GPU, `num_xcc` (MI300X: 8). NULL
    -- otherwise
    xcc_count       INTEGER,
    -- [count] AMD formats: SIMDs per CU, `simd_per_cu` (CDNA: 4)
    simd_per_cu     INTEGER,
    -- [count] AMD formats: wave slots per CU, `max_waves_per_cu` (MI300X: 32)
    max_waves_per_cu INTEGER,
    -- Kineto: the whole entry, verbatim. XPlane: `{"plane": …}` and the plane's stats. AMD: the agent
    -- record (below)
    properties      JSON
);

-- One row per device activity: kernel, memory copy or set, XLA op, MTIA command-processor event (view
-- `kernels`). The column texts give the Kineto source; the XPlane and AMD sources are tabled under
-- `kernels` in docs/schema.md.
CREATE TABLE device_activity (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- the rank within the run (`ranks.rank`)
    rank            INTEGER NOT NULL,
    -- `args.device`, else `pid`
    device          INTEGER,
    -- `args.stream`, else `tid`. Stream `0` (the HIP default stream) is an ordinary stream
    stream          VARCHAR,
    -- `kernel` | `memcpy` | `memset` | `mtia_ccp` | `xla_async` (XPlane), see
    -- [vocabularies](#category-vocabularies)
    category        VARCHAR NOT NULL,
    -- event `name` (`''` if missing)
    name            VARCHAR NOT NULL,
    -- [ns] `round(ts * 1000)`, exact (see [Time base](#time-base))
    start_ns        BIGINT NOT NULL,
    -- [ns] `round(dur * 1000)`, exact; 0 when `dur` is missing
    dur_ns          BIGINT NOT NULL,
    -- `args.correlation`, which links the row to its runtime call
    correlation_id  BIGINT,
    -- `args."External id"` (2021 traces: `"external id"`), which links it to the op
    external_id     BIGINT,
    -- the trace's own `cat`: `kernel`/`Kernel`, `gpu_memcpy`/`Memcpy`, `gpu_memset`/`Memset`,
    -- `mtia_ccp_events`. XPlane: `xplane:<line name>`
    trace_category  VARCHAR NOT NULL,
    -- Kineto: the event's `pid` as text. XPlane: the plane name. rocprofv3 formats: the OS process id. NULL
    -- for RPD
    pid             VARCHAR,
    -- Kineto: the event's `tid` as text. XPlane: the line name. rocprofv3 formats: the OS thread id. NULL
    -- for RPD
    tid             VARCHAR,
    -- [count] `args.grid[0]` (blocks). NVIDIA always; AMD only in newer ROCm (≥ 7) traces
    grid_x          INTEGER,
    -- [count] `args.grid[1]` (blocks). NVIDIA always; AMD only in newer ROCm (≥ 7) traces
    grid_y          INTEGER,
    -- [count] `args.grid[2]` (blocks). NVIDIA always; AMD only in newer ROCm (≥ 7) traces
    grid_z          INTEGER,
    -- [count] `args.block[0]` (threads)
    block_x         INTEGER,
    -- [count] `args.block[1]` (threads)
    block_y         INTEGER,
    -- [count] `args.block[2]` (threads)
    block_z         INTEGER,
    -- [count] `args."registers per thread"`
    registers_per_thread INTEGER,
    -- [bytes] `args."shared memory"` (per block)
    shared_mem_bytes BIGINT,
    -- [count] `args."blocks per SM"` (grid blocks ÷ SMs/CUs, fractional)
    blocks_per_cu   DOUBLE,
    -- [count] `args."warps per SM"`
    warps_per_cu    DOUBLE,
    -- [%] `args."est. achieved occupancy %"` (0–100)
    est_occupancy_pct DOUBLE,
    -- [bytes] `args.bytes` (memcpy/memset)
    bytes           BIGINT,
    -- [GB/s (10⁹ B/s)] `args."memory bandwidth (GB/s)"`, as the profiler computed it
    bandwidth_gbps  DOUBLE,
    -- `args.kind`, for example `DtoD`, `HtoD` (AMD memcpy) or `Dispatch Kernel` (AMD kernel)
    kind            VARCHAR,
    -- `args."Collective name"` (NCCL/RCCL kernels)
    collective_name VARCHAR,
    -- [elements] `args."In msg nelems"`: elements of the collective's input
    in_msg_nelems   BIGINT,
    -- [elements] `args."Out msg nelems"`: elements of the collective's output
    out_msg_nelems  BIGINT,
    -- [count] `args."Group size"`
    group_size      INTEGER,
    -- `args.dtype`
    dtype           VARCHAR,
    -- [ns] XPlane TPU ops: `round(device_offset_ps / 1000)`, the op's start by the device's own clock (stat
    -- `device_offset_ps`), on the session-relative time base. NULL elsewhere
    device_start_ns BIGINT,
    -- [ns] XPlane TPU ops: `round(device_duration_ps / 1000)`, the duration XProf reports (stat
    -- `device_duration_ps`). NULL elsewhere, including `xla_async` rows
    device_dur_ns   BIGINT,
    -- XPlane: the event's metadata id, which keys [`op_costs`](#op_costs) together with `(run_id, rank,
    -- device)`. NULL for Kineto
    op_metadata_id  BIGINT,
    -- XPlane: the event's `hlo_module` stat, else the op metadata's, e.g. `jit_prefill` (GPU and CPU
    -- captures; NULL in the TPU sample)
    hlo_module      VARCHAR,
    -- XPlane: the op metadata's `hlo_category` stat (XProf's op class, e.g. `loop fusion`, `all-reduce`,
    -- `copy-start`, `copy-done`, `broadcast`); TPU captures carry it
    hlo_category    VARCHAR,
    -- XPlane: the event's `program_id` stat, else the op metadata's, as text. It equals
    -- `xla_modules.fingerprint` (TPU: the module's fingerprint, e.g. `12190760917235803885`; GPU/CPU: the
    -- module id, e.g. `6`)
    program_id      VARCHAR,
    -- [FLOP] XPlane: the op metadata's `flops` stat, XLA's cost-model count for one execution of the op
    -- (TPU captures carry it; NULL in the GPU and CPU samples). NULL for Kineto (Kineto FLOPs are per
    -- framework op: `ops.flops`)
    flops           DOUBLE,
    -- [FLOP] XPlane: the op metadata's `model_flops` stat
    model_flops     DOUBLE,
    -- [bytes] XPlane: the op metadata's `bytes_accessed` stat (XLA's cost-model bytes read + written, all
    -- memory spaces)
    bytes_accessed  DOUBLE,
    -- [bytes] XPlane: HBM bytes read + written (`op_costs.hbm_read_bytes + hbm_write_bytes`), summed from
    -- the op metadata's `memory_access_breakdown` over its entries with memory space 1 (HBM). NULL when the
    -- op has no breakdown (e.g. `copy-start`)
    hbm_bytes       DOUBLE,
    -- [JSON text] XPlane: the event's other stats, see [JSON-text columns](#json-text-and-json-columns).
    -- AMD: ids, see [AMD rows](#amd-rows). NULL for Kineto
    args            VARCHAR,
    -- AMD: the kernel dispatch id (rocprofv3 `Dispatch_Id`); joins [`counters`](#counters). NULL for
    -- copies, RPD, Kineto and XPlane
    dispatch_id     BIGINT,
    -- AMD: the HSA queue the dispatch (or copy) went through. NULL for Kineto and XPlane
    queue_id        VARCHAR,
    -- [bytes] AMD: scratch (private segment) bytes per work-item the dispatch requested
    scratch_bytes   BIGINT,
    -- [registers] AMD: the kernel's arch VGPRs per work-item, from its code object
    vgpr_count      INTEGER,
    -- [registers] AMD: the kernel's accumulation VGPRs (AGPRs) per work-item, from its code object
    accum_vgpr_count INTEGER,
    -- [registers] AMD: the kernel's SGPRs per wave, from its code object
    sgpr_count      INTEGER
);

-- One row per stored host-side event (and per XPlane device span that is not device activity), told apart
-- by `category` (see Category vocabularies in docs/schema.md). The views `ops`, `runtime_calls`,
-- `annotations`, `syncs`, `tracemes`, `device_spans`, `module_executions` and `compiles` select from it.
CREATE TABLE host_events (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- the rank within the run (`ranks.rank`)
    rank            INTEGER NOT NULL,
    -- the event's `pid` as text. XPlane: the plane name (`/host:CPU`, `/device:TPU:0`). AMD formats: the OS
    -- process id
    pid             VARCHAR,
    -- the event's `tid` as text. XPlane: the line (thread) name. AMD formats: the OS thread id
    tid             VARCHAR,
    -- what the event is: `op`, `runtime`, `driver`, `annotation`, `gpu_annotation`, `sync`, `overhead`,
    -- `trace`, `python`, `other`; XPlane also `traceme`, `step`, `xla_module`, `device_traceme`,
    -- `framework_op`, `name_scope`, `source`, `host_offload_op` (see [Category
    -- vocabularies](#category-vocabularies))
    category        VARCHAR NOT NULL,
    -- the trace's own `cat`. XPlane: `xplane:` and the category as first written. AMD formats: the API
    -- domain or marker kind (`HIP_RUNTIME_API_EXT`, `MARKER_CORE_RANGE_API`, RPD `hip`, `roctx`)
    trace_category  VARCHAR NOT NULL,
    -- the event's name (an op, API call, annotation message, …)
    name            VARCHAR NOT NULL,
    -- [ns] start on the trace's own clock (see [Time base](#time-base))
    start_ns        BIGINT NOT NULL,
    -- [ns] duration
    dur_ns          BIGINT NOT NULL,
    -- `args.correlation` (XPlane: the `correlation_id` stat; AMD formats: the internal correlation id),
    -- which links a runtime call to the device activity it launched
    correlation_id  BIGINT,
    -- `args."External id"`, which an op shares with the runtime calls it made. AMD formats: the external
    -- correlation id (0 → NULL)
    external_id     BIGINT,
    -- `args."Sequence number"` (links autograd forward and backward ops)
    sequence_number BIGINT,
    -- `args."Fwd thread id"`
    fwd_thread_id   BIGINT,
    -- [elements, JSON text] `args."Input Dims"`: the inputs' shapes
    input_dims      VARCHAR,
    -- [JSON text] `args."Input type"`: the inputs' dtypes
    input_types     VARCHAR,
    -- [elements, JSON text] `args."Input Strides"`
    input_strides   VARCHAR,
    -- [JSON text] `args."Concrete Inputs"` (scalar arguments as strings)
    concrete_inputs VARCHAR,
    -- [FLOP] `args.flops`: floating-point operations of an op call (profiled `with_flops`)
    flops           DOUBLE,
    -- `args.stream` (CUPTI sync records; Triton `cpu_op`s)
    stream          VARCHAR,
    -- `args.device` (CUPTI sync records). XPlane rows of a device plane: the plane's index; NULL for host
    -- planes
    device          INTEGER,
    -- `args.cbid`: the CUPTI callback id of a runtime or driver call
    cbid            INTEGER,
    -- `args."Collective name"` (`record_param_comms` ops)
    collective_name VARCHAR,
    -- [elements] `args."In msg nelems"`
    in_msg_nelems   BIGINT,
    -- [elements] `args."Out msg nelems"`
    out_msg_nelems  BIGINT,
    -- [count] `args."Group size"`
    group_size      INTEGER,
    -- `args.dtype`
    dtype           VARCHAR,
    -- [JSON text] XPlane: the event's stats; AMD formats: ids and argument text (see [JSON-text
    -- columns](#json-text-and-json-columns)). NULL for Kineto
    args            VARCHAR
);

-- One row per device plane and XLA op metadata id that carries compiler cost estimates (XPlane; view
-- `op_costs`).
CREATE TABLE xla_op_costs (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- the rank within the run (`ranks.rank`)
    rank            INTEGER NOT NULL,
    -- the plane's index, as `kernels.device`
    device          INTEGER NOT NULL,
    -- the event metadata id (`kernels.op_metadata_id`)
    op_metadata_id  BIGINT NOT NULL,
    -- the metadata's display name, else its name (`all-reduce`, `broadcast.2`)
    name            VARCHAR,
    -- the metadata's name: the HLO instruction text (`%broadcast.2 = f32[5,1024,1024,256]{…} broadcast(…)`)
    hlo_text        VARCHAR,
    -- `hlo_category` stat
    hlo_category    VARCHAR,
    -- `program_id` stat (= `xla_modules.fingerprint`)
    program_id      VARCHAR,
    -- [FLOP] `flops` stat, per execution
    flops           DOUBLE,
    -- [FLOP] `model_flops` stat
    model_flops     DOUBLE,
    -- [bytes] `bytes_accessed` stat
    bytes_accessed  DOUBLE,
    -- [bytes] `raw_bytes_accessed` stat
    raw_bytes_accessed DOUBLE,
    -- [bytes] from the `memory_access_breakdown` stat: Σ bytes of the read entries with memory space 1
    -- (HBM). NULL without a breakdown
    hbm_read_bytes  DOUBLE,
    -- [bytes] from the `memory_access_breakdown` stat: Σ bytes of the write entries with memory space 1
    -- (HBM). NULL without a breakdown
    hbm_write_bytes DOUBLE,
    -- [JSON text] the whole breakdown, e.g. `[{"op": "read", "memory_space": 1, "bytes": 5368709120}, …]`
    -- (`op`: `read`, `write`, or the operation type number)
    memory_breakdown VARCHAR,
    -- `shape_with_layout` stat, e.g. `f32[5,1024,1024,256]{3,2,1,0:T(8,128)}`
    shape_with_layout VARCHAR,
    -- `tf_op` stat (the framework op, e.g. `jit(_psum)/jit(main)/reduce_sum:`)
    tf_op           VARCHAR,
    -- `deduplicated_name` stat
    deduplicated_name VARCHAR,
    -- `source` stat (`file.py:line`)
    source          VARCHAR
);

-- One row per (kernel dispatch, hardware counter, pass) of an AMD counter collection (view `counters`).
CREATE TABLE counter_values (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- the rank of the process that collected it
    rank            INTEGER NOT NULL,
    -- HIP device index of the dispatch's agent (as `kernels.device`)
    device          INTEGER,
    -- internal correlation id of the dispatch (rocpd `stack_id`, CSV `Correlation_Id`, JSON
    -- `dispatch_data.correlation_id.internal`)
    correlation_id  BIGINT,
    -- the dispatch id: join `kernels` on `(run_id, rank, dispatch_id)`
    dispatch_id     BIGINT,
    -- the kernel's name as in `kernels.name` of that format
    kernel_name     VARCHAR,
    -- counter name (`SQ_WAVES`, `GRBM_GUI_ACTIVE`, `TCC_HIT`, …; derived metrics as rocprofv3 names them)
    counter         VARCHAR NOT NULL,
    -- [the counter's unit] Σ over hardware instances
    value           DOUBLE,
    -- NULL for counters of a single execution. CSV and JSON: the `pmc_N` / `pass_N` folder (one of the
    -- file's three nearest parents) when rocprofv3 split the counters over several runs of the
    -- application; CSV counters of several separately named outputs without such folders (e.g. `decode_stall_*`,
    -- `decode_fetch_*`: separate executions): the output's prefix. rocpd: the `pmc_N` / `pass_N` folder the
    -- database sits in, else NULL
    pass            VARCHAR
);

-- One row per finding of an analyzer on a run, written by `tracekit analyze` (a run's rows of an analyzer
-- are replaced when it runs again; view `findings`).
CREATE TABLE finding_rows (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- the analyzer that found it (`tracekit.analysis.base.ANALYZERS`)
    analyzer        VARCHAR NOT NULL,
    -- `info` | `warning` | `critical`, from the share of the run's device window a fix would save (under 5
    -- %, under 20 %, else); `error` when the analyzer itself failed on the run
    severity        VARCHAR NOT NULL,
    -- one-line summary
    title           VARCHAR NOT NULL,
    -- the explanation and what to do
    detail          VARCHAR NOT NULL,
    -- [JSON] the numbers and the offending kernels, ops or functions the finding rests on
    evidence        JSON,
    -- [ns] estimated device or wall time a fix saves over the run; NULL when not computable
    saving_ns       BIGINT,
    -- [fraction, 0..1] `saving_ns` as a share of the run's device window time
    saving_fraction DOUBLE,
    -- [UTC] when the analysis ran
    analyzed_at     TIMESTAMP NOT NULL
);

-- One row per metric, a scalar KPI of a run for trends and CI gates, written by `tracekit analyze`
-- (replaced like `finding_rows`; view `metrics`).
CREATE TABLE metric_rows (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- the analyzer that computed it
    analyzer        VARCHAR NOT NULL,
    -- the metric's name
    name            VARCHAR NOT NULL,
    -- the value, in `unit`; NULL when the run does not have it
    value           DOUBLE,
    -- the value's unit as text: `fraction` (0..1), `ms`, `us`, `s`, `bytes`, `tokens`, `tokens/s`, `req/s`,
    -- `x`, …
    unit            VARCHAR NOT NULL,
    -- `lower` | `higher`: the direction that is an improvement (what `tracekit check` gates on)
    better          VARCHAR NOT NULL,
    -- [UTC] when the analysis ran
    analyzed_at     TIMESTAMP NOT NULL
);

-- Real vs padded prompt tokens per request, attached with `tracekit analyze RUN --lengths FILE` (replaced
-- on each `--lengths`; view `token_lengths`).
CREATE TABLE token_length_rows (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- position in the file, from 0
    request         INTEGER NOT NULL,
    -- [tokens] the request's real length
    real_tokens     BIGINT NOT NULL,
    -- [tokens] the length it ran at (= real_tokens when the file gives none)
    padded_tokens   BIGINT NOT NULL,
    -- the file's path
    source          VARCHAR NOT NULL
);

-- One row per request of the load driver (`tracekit capture --load`,
-- `tracekit.api.store_requests`; replaced as a whole on each call; view `requests`).
CREATE TABLE request_rows (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- 0, 1, … in the order the driver issued the requests
    request_id      BIGINT NOT NULL,
    -- [ns, Unix time] just before the request was sent (connection set-up included in what follows)
    start_ns        BIGINT NOT NULL,
    -- [ns] time to first token: to the first SSE chunk carrying text; NULL if none arrived
    ttft_ns         BIGINT,
    -- [ns] to the end of the stream (`data: [DONE]`), or to the failure
    e2e_ns          BIGINT NOT NULL,
    -- [tokens] the server's `usage.prompt_tokens`; without a usage chunk, the prompt's whitespace-separated
    -- words
    prompt_tokens   BIGINT,
    -- [tokens] the server's `usage.completion_tokens`; without a usage chunk, the text-carrying chunks
    -- received
    output_tokens   BIGINT NOT NULL,
    -- [ns] inter-token latencies: the gaps between successive text-carrying chunks (`output_tokens − 1` of
    -- them when the server streams one token per chunk)
    itl_ns          BIGINT[] NOT NULL,
    -- HTTP status; NULL when no response arrived (refused, timed out, reset)
    status          INTEGER,
    -- NULL for a complete stream; else why it failed (`HTTP 500: …`, `stream ended before data: [DONE] …`,
    -- `timed out after 60 s`, …)
    error           VARCHAR,
    -- `usage` (the server's usage chunk) or `counted` (chunks and words, above)
    token_count_source VARCHAR NOT NULL,
    -- the agentic load profile's session (0, 1, …): its turns send the growing context of one conversation;
    -- NULL for independent prompts (schema 6)
    session_id      BIGINT,
    -- the turn within the session, from 0 (turn k sends the context of turns 0 … k−1 plus its own message);
    -- a sub-agent request carries the turn it branched from; NULL for independent prompts (schema 6)
    turn            INTEGER,
    -- [tokens] of the prompt, served from the server's prefix cache (`usage.prompt_tokens_details.cached_tokens`,
    -- as vLLM and SGLang report it); NULL when the server does not say (schema 6)
    cached_tokens   BIGINT
);

-- The server's Prometheus metrics (`GET /metrics` of vLLM, SGLang, …) scraped during a capture window: one
-- row per sample per scrape (`tracekit capture --load`; view `server_metrics`). Schema 6.
CREATE TABLE server_metric_rows (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- [ns, Unix time] when the scrape was sent
    t_ns            BIGINT NOT NULL,
    -- the sample's name as exposed, e.g. `vllm:prefix_cache_hits_total`, `sglang:num_queue_reqs`, a histogram's
    -- `…_bucket` / `…_sum` / `…_count`
    name            VARCHAR NOT NULL,
    -- the sample's labels in the exposition format, sorted by name: `engine="0",model_name="m"` ('' for none)
    labels          VARCHAR NOT NULL,
    -- [the metric's own unit] the sample's value (counters are cumulative since the server started)
    value           DOUBLE
);

-- One row per AMD PC sample (rocprofv3 `--pc-sampling-*`; view `pc_samples`, which adds the dispatch's
-- kernel).
CREATE TABLE pc_sample_rows (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- the rank of the process that was sampled
    rank            INTEGER NOT NULL,
    -- HIP device index of the sample's agent when the file states it, else NULL (the view then takes the
    -- dispatch's `kernels.device`)
    device          INTEGER,
    -- the sampled wave's dispatch: `kernels.dispatch_id`
    dispatch_id     BIGINT,
    -- internal correlation id of the launch (CSV `Correlation_Id`; rocpd the sample event's `stack_id`)
    correlation_id  BIGINT,
    -- [ns] when the sample was taken (the trace's clock, as `kernels.start_ns`)
    timestamp_ns    BIGINT,
    -- `stochastic` or `host_trap`
    method          VARCHAR NOT NULL,
    -- active lanes of the wave (bit per lane; 2⁶⁴ − 1 = all 64). rocpd stores it as REAL, so 2⁶⁴ − 1 reads
    -- back rounded and is clamped to 2⁶⁴ − 1
    exec_mask       UBIGINT,
    -- the disassembled instruction at the PC (`s_waitcnt vmcnt(0)`)
    instruction     VARCHAR,
    -- source location of the instruction when the code object has debug info (`file:line`), else NULL
    instruction_comment VARCHAR,
    -- stochastic: the wave issued an instruction at the sample; host trap: NULL
    wave_issued     BOOLEAN,
    -- stochastic: `VALU`, `MATRIX`, `SCALAR`, `TEX`, `LDS`, `LDS_DIRECT`, `FLAT`, `EXPORT`, `MESSAGE`,
    -- `BARRIER`, `BRANCH_NOT_TAKEN`, `BRANCH_TAKEN`, `JUMP`, `OTHER`, `NO_INST`, `DUAL_VALU`, `NONE`; host
    -- trap: NULL
    instruction_type VARCHAR,
    -- stochastic: why the wave did not issue: `NONE` (it issued, or no reason), `NO_INSTRUCTION_AVAILABLE`,
    -- `ALU_DEPENDENCY`, `WAITCNT`, `INTERNAL_INSTRUCTION`, `BARRIER_WAIT`, `ARBITER_NOT_WIN`,
    -- `ARBITER_WIN_EX_STALL`, `OTHER_WAIT`, `SLEEP_WAIT`; host trap: NULL
    stall_reason    VARCHAR,
    -- [count] stochastic: waves resident on the CU at the sample (gfx9); host trap: NULL
    wave_count      INTEGER
);

-- One row per compiled XLA module listed in a host's `/host:metadata` plane (XPlane; view `xla_modules`).
CREATE TABLE xla_module_meta (
    -- the run (`runs.run_id`)
    run_id          VARCHAR NOT NULL,
    -- the rank within the run (`ranks.rank`)
    rank            INTEGER NOT NULL,
    -- the metadata name, e.g. `jit_prefill(6)`, `jit_f(12190760917235803885)`
    module_name     VARCHAR NOT NULL,
    -- `module_name` without `(N)` and without a leading `jit_`: `prefill`, `f`
    function        VARCHAR,
    -- the `N` of `(N)`: TPU the module's fingerprint, GPU/CPU the module id. Equals `kernels.program_id`
    -- and `module_executions.program_id`
    fingerprint     VARCHAR,
    -- `HloModuleProto.id` from the serialized HLO proto
    module_id       BIGINT,
    -- the entry computation's host program shape in XLA's short syntax: `(f32[2,128], s32[1,12]) ->
    -- (s32[1], f32[2,1,2,128,64])`. Element types as XLA names them (`pred`, `s32`, `u32`, `bf16`,
    -- `f8e4m3fn`, …), no layouts; tuples in parentheses
    entry_signature VARCHAR,
    -- [JSON text] the parameters' shapes as a JSON list, e.g. `["f32[2,128]", "s32[1,12]"]`:
    -- `param_shapes::JSON::VARCHAR[]`
    param_shapes    VARCHAR,
    -- the result shape (`s32[]`, or a tuple `(…)`)
    result_shape    VARCHAR,
    -- [bytes] size of the serialized `Hlo Proto`
    hlo_proto_bytes BIGINT
);

-- The model a run served, attached with `--model` (`tracekit.api.attach_model`): one row per run, replaced
-- on each attach (view `run_models`).
CREATE TABLE model_rows (
    -- the run (`runs.run_id`)
    run_id          VARCHAR PRIMARY KEY,
    -- catalog name (`gpt-oss-20b`), or the config.json's folder name
    model           VARCHAR NOT NULL,
    -- `catalog` or `config.json`
    origin          VARCHAR NOT NULL,
    -- every `ModelSpec` field (`tracekit.analysis.models.to_json`), precisions included
    spec            JSON NOT NULL,
    -- [ranks] ranks the weights are split over
    tensor_parallel INTEGER NOT NULL,
    -- `--tp`, the trace's world size (`ranks.world_size`), or the default 1
    tp_source       VARCHAR NOT NULL,
    -- [JSON] `ModelSpec.step_constants(tensor_parallel)` at attach time: the per-rank constants that the
    -- view `run_models` spreads into columns
    constants       JSON NOT NULL,
    -- [UTC] when the model was attached
    attached_at     TIMESTAMP NOT NULL
);
