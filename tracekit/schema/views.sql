-- views.sql: the public views of the tracekit store, the contract that tests, the dashboard, CI
-- alerts and outside scripts query. Columns may be added; existing names never change. Recreated
-- after every migration. Above each view: what one row is, then one line per column, in order,
-- `@column NAME TYPE [unit] meaning`, or `@column NAME TYPE = table.column` for a column of
-- tables.sql passed on unchanged. docs/schema.md is generated from them (`python -m tracekit.schema`).

-- One row per ingested run (one PATH given to `tracekit ingest`). From `run_meta`.
-- @column run_id VARCHAR = run_meta.run_id
-- @column source VARCHAR = run_meta.source
-- @column format VARCHAR = run_meta.format
-- @column vendor VARCHAR = run_meta.vendor
-- @column device_name VARCHAR = run_meta.device_name
-- @column label VARCHAR = run_meta.label
-- @column workload VARCHAR = run_meta.workload
-- @column captured_at TIMESTAMP = run_meta.captured_at
-- @column ingested_at TIMESTAMP = run_meta.ingested_at
-- @column tags MAP(VARCHAR, VARCHAR) = run_meta.tags
-- @column content_sha256 VARCHAR = run_meta.content_sha256
-- @column n_files INTEGER = run_meta.n_files
-- @column n_ranks INTEGER = run_meta.n_ranks
-- @column input_bytes BIGINT = run_meta.input_bytes
-- @column n_trace_events BIGINT = run_meta.n_trace_events
-- @column n_skipped_events BIGINT = run_meta.n_skipped_events
-- @column tracekit_version VARCHAR = run_meta.tracekit_version
-- @column n_invalid_events BIGINT = run_meta.n_invalid_events
-- @column n_device_events BIGINT = run_meta.n_device_events
-- @column n_host_events BIGINT = run_meta.n_host_events
-- @column device_time_ns BIGINT = run_meta.device_time_ns
-- @column main_rank INTEGER = run_meta.main_rank
-- @column main_device INTEGER = run_meta.main_device
CREATE OR REPLACE VIEW runs AS
SELECT run_id, source, format, vendor, device_name, label, workload, captured_at, ingested_at,
       tags, content_sha256, n_files, n_ranks, input_bytes, n_trace_events, n_skipped_events,
       tracekit_version, n_invalid_events, n_device_events, n_host_events, device_time_ns,
       main_rank, main_device
FROM run_meta;

-- One row per device activity: kernel, memcpy, memset, MTIA CCP event; XLA op on TPU (also async ops) or on
-- the CPU of a CPU-only XLA capture; AMD kernel dispatch or memory copy. From `device_activity`.
-- @column run_id VARCHAR = device_activity.run_id
-- @column rank INTEGER = device_activity.rank
-- @column device INTEGER = device_activity.device
-- @column stream VARCHAR = device_activity.stream
-- @column category VARCHAR = device_activity.category
-- @column name VARCHAR = device_activity.name
-- @column start_ns BIGINT = device_activity.start_ns
-- @column dur_ns BIGINT = device_activity.dur_ns
-- @column correlation_id BIGINT = device_activity.correlation_id
-- @column external_id BIGINT = device_activity.external_id
-- @column trace_category VARCHAR = device_activity.trace_category
-- @column end_ns BIGINT [ns] `start_ns + dur_ns`
-- @column grid_x INTEGER = device_activity.grid_x
-- @column grid_y INTEGER = device_activity.grid_y
-- @column grid_z INTEGER = device_activity.grid_z
-- @column block_x INTEGER = device_activity.block_x
-- @column block_y INTEGER = device_activity.block_y
-- @column block_z INTEGER = device_activity.block_z
-- @column registers_per_thread INTEGER = device_activity.registers_per_thread
-- @column shared_mem_bytes BIGINT = device_activity.shared_mem_bytes
-- @column blocks_per_cu DOUBLE = device_activity.blocks_per_cu
-- @column warps_per_cu DOUBLE = device_activity.warps_per_cu
-- @column est_occupancy_pct DOUBLE = device_activity.est_occupancy_pct
-- @column bytes BIGINT = device_activity.bytes
-- @column bandwidth_gbps DOUBLE = device_activity.bandwidth_gbps
-- @column kind VARCHAR = device_activity.kind
-- @column collective_name VARCHAR = device_activity.collective_name
-- @column in_msg_nelems BIGINT = device_activity.in_msg_nelems
-- @column out_msg_nelems BIGINT = device_activity.out_msg_nelems
-- @column group_size INTEGER = device_activity.group_size
-- @column dtype VARCHAR = device_activity.dtype
-- @column device_start_ns BIGINT = device_activity.device_start_ns
-- @column device_dur_ns BIGINT = device_activity.device_dur_ns
-- @column op_metadata_id BIGINT = device_activity.op_metadata_id
-- @column hlo_module VARCHAR = device_activity.hlo_module
-- @column hlo_category VARCHAR = device_activity.hlo_category
-- @column program_id VARCHAR = device_activity.program_id
-- @column flops DOUBLE = device_activity.flops
-- @column model_flops DOUBLE = device_activity.model_flops
-- @column bytes_accessed DOUBLE = device_activity.bytes_accessed
-- @column hbm_bytes DOUBLE = device_activity.hbm_bytes
-- @column args VARCHAR = device_activity.args
-- @column dispatch_id BIGINT = device_activity.dispatch_id
-- @column queue_id VARCHAR = device_activity.queue_id
-- @column scratch_bytes BIGINT = device_activity.scratch_bytes
-- @column vgpr_count INTEGER = device_activity.vgpr_count
-- @column accum_vgpr_count INTEGER = device_activity.accum_vgpr_count
-- @column sgpr_count INTEGER = device_activity.sgpr_count
CREATE OR REPLACE VIEW kernels AS
SELECT run_id, rank, device, stream, category, name, start_ns, dur_ns, correlation_id,
       external_id, trace_category, start_ns + dur_ns AS end_ns,
       grid_x, grid_y, grid_z, block_x, block_y, block_z, registers_per_thread,
       shared_mem_bytes, blocks_per_cu, warps_per_cu, est_occupancy_pct, bytes, bandwidth_gbps,
       kind, collective_name, in_msg_nelems, out_msg_nelems, group_size, dtype,
       device_start_ns, device_dur_ns, op_metadata_id, hlo_module, hlo_category, program_id,
       flops, model_flops, bytes_accessed, hbm_bytes, args, dispatch_id, queue_id, scratch_bytes,
       vgpr_count, accum_vgpr_count, sgpr_count
FROM device_activity;

-- One row per run: its device activities' count and summed duration, the run list's columns. The
-- rollups of `runs`; counted from `device_activity` only for a run that a writer older than schema 5
-- committed to a lake without them, so the list never scans the events of the other runs.
-- @column run_id VARCHAR = run_meta.run_id
-- @column n_device_events BIGINT [count] rows of `device_activity` of the run
-- @column device_time_ns BIGINT [ns] Σ `dur_ns` over them (overlapping activities count each)
CREATE OR REPLACE VIEW run_device_totals AS
SELECT m.run_id, coalesce(m.n_device_events, c.n, 0) AS n_device_events,
       coalesce(m.device_time_ns, c.t::BIGINT, 0) AS device_time_ns
FROM run_meta m
LEFT JOIN (SELECT run_id, count(*) AS n, sum(dur_ns) AS t FROM device_activity
           WHERE run_id IN (SELECT run_id FROM run_meta WHERE n_device_events IS NULL) GROUP BY run_id) c
  USING (run_id);

-- One row per run that lists a device: its main device, which the analyzers cost against and the
-- dashboard names — of the `devices` listed, the one with the most `device_activity` rows (ties:
-- lowest rank, then device). The rollup of `runs`; chosen from the events only for a run without
-- rollups (a lake run of a writer older than schema 5, or a run being ingested).
-- @column run_id VARCHAR = run_meta.run_id
-- @column rank INTEGER = device_meta.rank
-- @column device INTEGER = device_meta.device
CREATE OR REPLACE VIEW run_main_device AS
SELECT run_id, main_rank AS rank, main_device AS device
FROM run_meta WHERE n_device_events IS NOT NULL AND main_rank IS NOT NULL
UNION ALL
SELECT d.run_id, d.rank, d.device
FROM device_meta d
LEFT JOIN (SELECT run_id, rank, device, count(*) AS n FROM device_activity
           WHERE run_id IN (SELECT run_id FROM run_meta WHERE n_device_events IS NULL) GROUP BY ALL) b
  USING (run_id, rank, device)
WHERE d.run_id IN (SELECT run_id FROM run_meta WHERE n_device_events IS NULL)
QUALIFY row_number() OVER (PARTITION BY d.run_id ORDER BY b.n DESC NULLS LAST, d.rank, d.device) = 1;

-- One row per finding of an analyzer on a run. From `finding_rows`.
-- @column run_id VARCHAR = finding_rows.run_id
-- @column analyzer VARCHAR = finding_rows.analyzer
-- @column severity VARCHAR = finding_rows.severity
-- @column title VARCHAR = finding_rows.title
-- @column detail VARCHAR = finding_rows.detail
-- @column evidence JSON = finding_rows.evidence
-- @column saving_ns BIGINT = finding_rows.saving_ns
-- @column saving_fraction DOUBLE = finding_rows.saving_fraction
-- @column analyzed_at TIMESTAMP = finding_rows.analyzed_at
CREATE OR REPLACE VIEW findings AS
SELECT run_id, analyzer, severity, title, detail, evidence, saving_ns, saving_fraction, analyzed_at
FROM finding_rows;

-- One row per metric (a scalar KPI of a run, for trends and CI gates). From `metric_rows`.
-- @column run_id VARCHAR = metric_rows.run_id
-- @column name VARCHAR = metric_rows.name
-- @column value DOUBLE = metric_rows.value
-- @column unit VARCHAR = metric_rows.unit
-- @column better VARCHAR = metric_rows.better
-- @column analyzer VARCHAR = metric_rows.analyzer
-- @column analyzed_at TIMESTAMP = metric_rows.analyzed_at
CREATE OR REPLACE VIEW metrics AS
SELECT run_id, name, value, unit, better, analyzer, analyzed_at FROM metric_rows;

-- One row per request of a lengths file: real vs padded prompt tokens. From `token_length_rows`.
-- @column run_id VARCHAR = token_length_rows.run_id
-- @column request INTEGER = token_length_rows.request
-- @column real_tokens BIGINT = token_length_rows.real_tokens
-- @column padded_tokens BIGINT = token_length_rows.padded_tokens
-- @column source VARCHAR = token_length_rows.source
CREATE OR REPLACE VIEW token_lengths AS
SELECT run_id, request, real_tokens, padded_tokens, source FROM token_length_rows;

-- One row per request of the load driver, with its end and time per output token; latencies in ns,
-- `start_ns` in Unix ns. From `request_rows`.
-- @column run_id VARCHAR = request_rows.run_id
-- @column request_id BIGINT = request_rows.request_id
-- @column start_ns BIGINT = request_rows.start_ns
-- @column ttft_ns BIGINT = request_rows.ttft_ns
-- @column e2e_ns BIGINT = request_rows.e2e_ns
-- @column end_ns BIGINT [ns, Unix time] `start_ns + e2e_ns`
-- @column prompt_tokens BIGINT = request_rows.prompt_tokens
-- @column output_tokens BIGINT = request_rows.output_tokens
-- @column itl_ns BIGINT[] = request_rows.itl_ns
-- @column status INTEGER = request_rows.status
-- @column error VARCHAR = request_rows.error
-- @column token_count_source VARCHAR = request_rows.token_count_source
-- @column session_id BIGINT = request_rows.session_id
-- @column turn INTEGER = request_rows.turn
-- @column cached_tokens BIGINT = request_rows.cached_tokens
-- @column tpot_ns DOUBLE [ns] time per output token after the first, `(e2e_ns − ttft_ns) / (output_tokens −
-- 1)`; NULL for failed requests and those with < 2 output tokens
CREATE OR REPLACE VIEW requests AS
SELECT run_id, request_id, start_ns, ttft_ns, e2e_ns, start_ns + e2e_ns AS end_ns, prompt_tokens,
       output_tokens, itl_ns, status, error, token_count_source, session_id, turn, cached_tokens,
       CASE WHEN error IS NULL AND ttft_ns IS NOT NULL AND output_tokens > 1
            THEN (e2e_ns - ttft_ns) / (output_tokens - 1) END AS tpot_ns
FROM request_rows;

-- The server's Prometheus samples scraped during the capture window, one row per sample per scrape; `t_ns`
-- in Unix ns. From `server_metric_rows`.
-- @column run_id VARCHAR = server_metric_rows.run_id
-- @column t_ns BIGINT = server_metric_rows.t_ns
-- @column name VARCHAR = server_metric_rows.name
-- @column labels VARCHAR = server_metric_rows.labels
-- @column value DOUBLE = server_metric_rows.value
CREATE OR REPLACE VIEW server_metrics AS
SELECT run_id, t_ns, name, labels, value FROM server_metric_rows;

-- One row per AMD PC sample (rocprofv3 `--pc-sampling-method host_trap|stochastic`) with its kernel. From
-- `pc_sample_rows` ⟕ `device_activity`.
-- @column run_id VARCHAR = pc_sample_rows.run_id
-- @column rank INTEGER = pc_sample_rows.rank
-- @column device INTEGER HIP device index: the dispatch's (`kernels.device`); NULL when the dispatch is not
-- in the run
-- @column dispatch_id BIGINT = pc_sample_rows.dispatch_id
-- @column correlation_id BIGINT = pc_sample_rows.correlation_id
-- @column kernel_name VARCHAR `kernels.name` of the dispatch, NULL when the run has no such dispatch (PC
-- sampling without `--kernel-trace`)
-- @column timestamp_ns BIGINT = pc_sample_rows.timestamp_ns
-- @column method VARCHAR = pc_sample_rows.method
-- @column exec_mask UBIGINT = pc_sample_rows.exec_mask
-- @column instruction VARCHAR = pc_sample_rows.instruction
-- @column instruction_comment VARCHAR = pc_sample_rows.instruction_comment
-- @column wave_issued BOOLEAN = pc_sample_rows.wave_issued
-- @column instruction_type VARCHAR = pc_sample_rows.instruction_type
-- @column stall_reason VARCHAR = pc_sample_rows.stall_reason
-- @column wave_count INTEGER = pc_sample_rows.wave_count
CREATE OR REPLACE VIEW pc_samples AS
SELECT p.run_id, p.rank, coalesce(p.device, k.device) AS device, p.dispatch_id, p.correlation_id,
       k.name AS kernel_name, p.timestamp_ns, p.method, p.exec_mask, p.instruction,
       p.instruction_comment, p.wave_issued, p.instruction_type, p.stall_reason, p.wave_count
FROM pc_sample_rows p
LEFT JOIN (SELECT run_id, rank, dispatch_id, any_value(name) AS name, any_value(device) AS device
           FROM device_activity WHERE category = 'kernel' AND dispatch_id IS NOT NULL GROUP BY ALL) k
  ON k.run_id = p.run_id AND k.rank = p.rank AND k.dispatch_id = p.dispatch_id;

-- One row per (kernel dispatch, hardware counter) value of an AMD counter collection. From
-- `counter_values`.
-- @column run_id VARCHAR = counter_values.run_id
-- @column rank INTEGER = counter_values.rank
-- @column device INTEGER = counter_values.device
-- @column correlation_id BIGINT = counter_values.correlation_id
-- @column dispatch_id BIGINT = counter_values.dispatch_id
-- @column kernel_name VARCHAR = counter_values.kernel_name
-- @column counter VARCHAR = counter_values.counter
-- @column value DOUBLE = counter_values.value
-- @column pass VARCHAR = counter_values.pass
CREATE OR REPLACE VIEW counters AS
SELECT run_id, rank, device, correlation_id, dispatch_id, kernel_name, counter, value, pass
FROM counter_values;

-- One row per host operator (`cpu_op` / 2021 `Operator`). From `host_events` (`category = 'op'`).
-- @column run_id VARCHAR the run (`runs.run_id`)
-- @column rank INTEGER the rank within the run (`ranks.rank`)
-- @column pid VARCHAR the event's `pid` as text
-- @column tid VARCHAR the event's `tid` as text
-- @column name VARCHAR for example `aten::mm`, or `triton_poi_…` for torch.compile ops
-- @column start_ns BIGINT [ns] start, as `kernels.start_ns` (the op's host-side span)
-- @column dur_ns BIGINT [ns] duration, as `kernels.dur_ns`
-- @column end_ns BIGINT [ns] `start_ns + dur_ns`
-- @column external_id BIGINT `args."External id"`, which kernels/runtime calls share
-- @column sequence_number BIGINT `args."Sequence number"` (links autograd forward and backward)
-- @column fwd_thread_id BIGINT `args."Fwd thread id"`
-- @column input_dims VARCHAR [elements, JSON text] `args."Input Dims"`, e.g. `[[8,48,32],[8,32,48]]`
-- @column input_types VARCHAR [JSON text] `args."Input type"`, e.g. `["float","float"]`
-- @column input_strides VARCHAR [elements, JSON text] `args."Input Strides"`
-- @column concrete_inputs VARCHAR [JSON text] `args."Concrete Inputs"` (scalar arguments as strings)
-- @column flops DOUBLE [FLOP] `args.flops` (floating-point operations of this call, when `with_flops`)
-- @column triton_stream VARCHAR `args.stream` of Triton `cpu_op`s. These are host events, **not** GPU time
-- @column trace_category VARCHAR `cpu_op` or `Operator`
-- @column collective_name VARCHAR = host_events.collective_name
-- @column in_msg_nelems BIGINT = host_events.in_msg_nelems
-- @column out_msg_nelems BIGINT = host_events.out_msg_nelems
-- @column group_size INTEGER = host_events.group_size
-- @column dtype VARCHAR = host_events.dtype
CREATE OR REPLACE VIEW ops AS
SELECT run_id, rank, pid, tid, name, start_ns, dur_ns, start_ns + dur_ns AS end_ns,
       external_id, sequence_number, fwd_thread_id, input_dims, input_types, input_strides,
       concrete_inputs, flops, stream AS triton_stream, trace_category,
       collective_name, in_msg_nelems, out_msg_nelems, group_size, dtype
FROM host_events WHERE category = 'op';

-- One row per CUDA/HIP/MTIA runtime or driver API call (AMD formats: also HSA, RCCL, … API calls). From
-- `host_events` (`category IN ('runtime','driver')`).
-- @column run_id VARCHAR the run (`runs.run_id`)
-- @column rank INTEGER the rank within the run (`ranks.rank`)
-- @column pid VARCHAR the process: the event's `pid` as text; XPlane: the plane name; AMD formats: the OS
-- process id
-- @column tid VARCHAR the thread: the event's `tid` as text; XPlane: the line name; AMD formats: the OS
-- thread id
-- @column name VARCHAR API name, e.g. `cudaLaunchKernel`, `hipExtModuleLaunchKernel`, `cuLaunchKernel`
-- @column start_ns BIGINT [ns] start of the host-side API call
-- @column dur_ns BIGINT [ns] duration of the host-side API call
-- @column end_ns BIGINT [ns] `start_ns + dur_ns`
-- @column correlation_id BIGINT `args.correlation` (XPlane: the `correlation_id` stat), equal to
-- `kernels.correlation_id` of what it launched
-- @column external_id BIGINT `args."External id"`
-- @column cbid INTEGER `args.cbid` (CUPTI callback id)
-- @column trace_category VARCHAR the trace's `cat`; XPlane: `xplane:traceme`
-- @column api_kind VARCHAR classification by name, first match wins (below)
CREATE OR REPLACE VIEW runtime_calls AS
-- most of the view's cost (0.064 → 0.027 s over 122,580 calls); a run filter reaches both sides
SELECT h.run_id, h.rank, h.pid, h.tid, h.name, h.start_ns, h.dur_ns, h.start_ns + h.dur_ns AS end_ns,
       h.correlation_id, h.external_id, h.cbid, h.trace_category, k.api_kind
FROM host_events h
JOIN (SELECT run_id, name,
         CASE
           WHEN regexp_matches(name, '^(cudaGraphLaunch|cuGraphLaunch|hipGraphLaunch)(_v[0-9]+)?(_ptsz|_spt)?$')
                THEN 'graph_launch'
           WHEN regexp_matches(name, '^(cudaLaunchKernel|cudaLaunchKernelExC|cudaLaunchCooperativeKernel|cudaLaunchCooperativeKernelMultiDevice|cuLaunchKernel|cuLaunchKernelEx|cuLaunchCooperativeKernel|hipLaunchKernel|hipLaunchKernelExC|hipExtLaunchKernel|hipModuleLaunchKernel|hipExtModuleLaunchKernel|hipHccModuleLaunchKernel|hipLaunchCooperativeKernel|hipModuleLaunchCooperativeKernel|hipExtLaunchMultiKernelMultiDevice)(_v[0-9]+)?(_ptsz|_spt)?$')
                OR name LIKE 'runFunction%'
                THEN 'kernel_launch'
           WHEN regexp_matches(name, '^(cuda|cu|hip)Memcpy') THEN 'memcpy'
           WHEN regexp_matches(name, '^(cuda|cu|hip)Memset') THEN 'memset'
           WHEN regexp_matches(name, '(?i)synchronize|streamwait|eventquery|streamquery') THEN 'sync'
           ELSE 'other'
         END AS api_kind
      FROM (SELECT DISTINCT run_id, name FROM host_events WHERE category IN ('runtime', 'driver'))) k
  ON k.run_id = h.run_id AND k.name = h.name
WHERE h.category IN ('runtime', 'driver');

-- One row per (runtime call, device activity) pair linked by correlation id. From `runtime_calls` ⋈
-- `device_activity`.
-- @column run_id VARCHAR the run (`runs.run_id`)
-- @column rank INTEGER the rank within the run (`ranks.rank`)
-- @column api_name VARCHAR `runtime_calls.name`
-- @column api_kind VARCHAR `runtime_calls.api_kind`
-- @column api_start_ns BIGINT [ns] start of the host call
-- @column api_dur_ns BIGINT [ns] duration of the host call
-- @column correlation_id BIGINT the id the call and the device activity share
-- @column kernel_name VARCHAR `kernels.name`
-- @column category VARCHAR `kernels.category` (kernel | memcpy | memset | mtia_ccp)
-- @column device INTEGER `kernels.device` of the device activity
-- @column stream VARCHAR `kernels.stream` of the device activity
-- @column start_ns BIGINT [ns] start of the device activity
-- @column dur_ns BIGINT [ns] duration of the device activity
-- @column launch_delay_ns BIGINT [ns] `start_ns − (api_start_ns + api_dur_ns)`: from the end of the API
-- call to the start on the device. It can be **negative** (synchronous copies, or a kernel that starts
-- before the call returns). It is not clipped
CREATE OR REPLACE VIEW launches AS
SELECT r.run_id, r.rank, r.name AS api_name, r.api_kind, r.start_ns AS api_start_ns,
       r.dur_ns AS api_dur_ns, k.correlation_id, k.name AS kernel_name, k.category,
       k.device, k.stream, k.start_ns, k.dur_ns,
       k.start_ns - (r.start_ns + r.dur_ns) AS launch_delay_ns
FROM runtime_calls r
JOIN device_activity k
  ON k.run_id = r.run_id AND k.rank = r.rank AND k.correlation_id = r.correlation_id;

-- One row per device activity with its launching runtime/driver call and framework op. From
-- `device_activity` ⋈ runtime/driver calls ⟕ `ops` (all in `host_events`).
-- @column run_id VARCHAR the run (`runs.run_id`)
-- @column rank INTEGER the rank within the run (`ranks.rank`)
-- @column correlation_id BIGINT the id the device activity and its launching call share
-- @column kernel_name VARCHAR `kernels.name` of the device activity
-- @column category VARCHAR `kernels.category` of the device activity
-- @column device INTEGER `kernels.device` of the device activity
-- @column stream VARCHAR `kernels.stream` of the device activity
-- @column start_ns BIGINT [ns] start of the device activity
-- @column dur_ns BIGINT [ns] duration of the device activity
-- @column api_name VARCHAR the launching runtime/driver call
-- @column external_id BIGINT the call's `External id`
-- @column op_name VARCHAR the launching op (`ops.name`), or NULL
-- @column input_dims VARCHAR [elements, JSON text] the op's input shapes (`ops.input_dims`)
-- @column input_types VARCHAR [JSON text] the op's input dtypes (`ops.input_types`)
-- @column op_flops DOUBLE [FLOP] the op's `flops` when the profiler recorded it
-- @column op_start_ns BIGINT [ns] start of the op's own span
-- @column op_dur_ns BIGINT [ns] duration of the op's own span (inclusive of its children)
-- @column concrete_inputs VARCHAR [JSON text] the op's scalar arguments (`ops.concrete_inputs`, e.g.
-- `is_causal`)
CREATE OR REPLACE VIEW kernel_ops AS
SELECT k.run_id, k.rank, k.correlation_id, k.name AS kernel_name, k.category, k.device, k.stream,
       k.start_ns, k.dur_ns, r.name AS api_name, r.external_id, o.name AS op_name,
       o.input_dims, o.input_types, o.flops AS op_flops, o.start_ns AS op_start_ns,
       o.dur_ns AS op_dur_ns, o.concrete_inputs
FROM device_activity k
JOIN host_events r
  ON r.run_id = k.run_id AND r.rank = k.rank AND r.correlation_id = k.correlation_id
 AND r.category IN ('runtime', 'driver')
LEFT JOIN host_events o
  ON o.run_id = r.run_id AND o.rank = r.rank AND o.external_id = r.external_id
 AND o.category = 'op';

-- One row per graph-launch runtime call. From `runtime_calls` ⟕ `device_activity`.
-- @column run_id VARCHAR the run (`runs.run_id`)
-- @column rank INTEGER the rank within the run (`ranks.rank`)
-- @column correlation_id BIGINT the graph launch call's id, shared by every device row of the replay
-- @column api_name VARCHAR `cudaGraphLaunch`, `hipGraphLaunch`, …
-- @column api_start_ns BIGINT [ns] start of the host call
-- @column api_dur_ns BIGINT [ns] duration of the host call
-- @column n_kernels BIGINT [count] device rows with this correlation id and `category = 'kernel'` (compute
-- kernels only). 0 when none was captured
-- @column n_copy_set_nodes BIGINT [count] device rows with this correlation id that are not kernels: the
-- graph's memcpy/memset nodes (`category` `memcpy`/`memset`; also `mtia_ccp`, were one to occur)
-- @column kernel_time_ns BIGINT [ns] Σ `dur_ns` of the **kernel** rows only (overlaps are counted twice); 0
-- when there are none. Copy/set nodes are not included
-- @column first_kernel_start_ns BIGINT [ns] earliest `start_ns` over **all** device rows of the launch,
-- copy/set nodes included (NULL if none)
-- @column last_kernel_end_ns BIGINT [ns] latest `end_ns` over all device rows of the launch, copy/set nodes
-- included (NULL if none)
CREATE OR REPLACE VIEW graph_launches AS
SELECT r.run_id, r.rank, r.correlation_id, r.name AS api_name, r.start_ns AS api_start_ns,
       r.dur_ns AS api_dur_ns,
       count(k.name) FILTER (WHERE k.category = 'kernel') AS n_kernels,
       count(k.name) FILTER (WHERE k.category <> 'kernel') AS n_copy_set_nodes,
       CAST(coalesce(sum(k.dur_ns) FILTER (WHERE k.category = 'kernel'), 0) AS BIGINT) AS kernel_time_ns,
       min(k.start_ns) AS first_kernel_start_ns, max(k.start_ns + k.dur_ns) AS last_kernel_end_ns
FROM runtime_calls r
LEFT JOIN device_activity k
  ON k.run_id = r.run_id AND k.rank = r.rank AND k.correlation_id = r.correlation_id
WHERE r.api_kind = 'graph_launch'
GROUP BY ALL;

-- One row per user annotation, on the host or on the GPU timeline (AMD: roctx ranges and marks); also
-- `ProfilerStep#N` ops (2021 schema) and XPlane step markers. From `host_events` (`category IN
-- ('annotation','gpu_annotation','step')`, or `category = 'op'` named `ProfilerStep#N`).
-- @column run_id VARCHAR the run (`runs.run_id`)
-- @column rank INTEGER the rank within the run (`ranks.rank`)
-- @column pid VARCHAR the event's `pid` as text; for GPU annotations the device, as Kineto writes it.
-- XPlane: the plane name (`/host:CPU`, `/device:GPU:4`)
-- @column tid VARCHAR the event's `tid` as text; for GPU annotations the stream, as Kineto writes it.
-- XPlane: the line name (`python`, `Steps`)
-- @column name VARCHAR `record_function` / `ProfilerStep#N` name; XPlane: the step event's name
-- @column start_ns BIGINT [ns] start of the annotated range
-- @column dur_ns BIGINT [ns] length of the annotated range
-- @column end_ns BIGINT [ns] `start_ns + dur_ns`
-- @column external_id BIGINT NULL for XPlane
-- @column on_device BOOLEAN true for `gpu_user_annotation` (the annotation projected onto the GPU timeline)
-- and for `step` rows from a device plane's `Steps` line (`host_events.device IS NOT NULL`); false for
-- `user_annotation`, 2021 `ProfilerStep#N` ops and the host TraceMe step markers (`/host:CPU`)
-- @column is_profiler_step BOOLEAN `name` matches `^ProfilerStep#[0-9]+$`, or the row is a `step`
-- @column step_num BIGINT the `step_num` stat of an XPlane `step` row (`args.step_num`). NULL otherwise:
-- Kineto `ProfilerStep#N` names are not parsed, and device `Steps` lines carry `step_name`, not `step_num`
CREATE OR REPLACE VIEW annotations AS
SELECT run_id, rank, pid, tid, name, start_ns, dur_ns, start_ns + dur_ns AS end_ns, external_id,
       category = 'gpu_annotation' OR (category = 'step' AND device IS NOT NULL) AS on_device,
       category = 'step' OR regexp_matches(name, '^ProfilerStep#[0-9]+$') AS is_profiler_step,
       TRY_CAST(json_extract_string(args, '$.step_num') AS BIGINT) AS step_num
FROM host_events
WHERE category IN ('annotation', 'gpu_annotation', 'step')
   -- 2021 schema: ProfilerStep#N is an Operator
   OR (category = 'op' AND regexp_matches(name, '^ProfilerStep#[0-9]+$'));

-- One row per device-side span that is not device activity (XPlane device planes): XLA module executions,
-- `XLA TraceMe`, `Steps`, framework-op, name-scope, source-code and host-offload lines. From `host_events`
-- (rows with a `device`).
-- @column run_id VARCHAR the run (`runs.run_id`)
-- @column rank INTEGER the rank within the run (`ranks.rank`)
-- @column device INTEGER the plane's index: `/device:TPU:2` → 2
-- @column plane VARCHAR the device plane's name, e.g. `/device:TPU:0`
-- @column line VARCHAR the line's name, e.g. `XLA Modules`, `XLA TraceMe`, `Steps`, `Framework Ops`
-- @column category VARCHAR `xla_module` | `device_traceme` | `step` | `framework_op` | `name_scope` |
-- `source` | `host_offload_op`, from the line (see [Category vocabularies](#category-vocabularies))
-- @column name VARCHAR the event's name
-- @column start_ns BIGINT [ns] start on the trace's clock (see [Time base](#time-base))
-- @column dur_ns BIGINT [ns] duration
-- @column end_ns BIGINT [ns] `start_ns + dur_ns`
-- @column args VARCHAR [JSON text] the event's stats, e.g. `{"run_id":3,"replica_id":0}`; NULL when it has
-- none
CREATE OR REPLACE VIEW device_spans AS
SELECT run_id, rank, device, pid AS plane, tid AS line, category, name, start_ns, dur_ns,
       start_ns + dur_ns AS end_ns, args
FROM host_events WHERE device IS NOT NULL AND category IN
    ('xla_module', 'device_traceme', 'step', 'framework_op', 'name_scope', 'source', 'host_offload_op');

-- One row per XPlane host TraceMe event (JAX `TraceAnnotation`s included) that is not a step marker, a
-- CUDA/HIP API call or an XLA op of a CPU-only capture. From `host_events` (`category = 'traceme'`).
-- @column run_id VARCHAR the run (`runs.run_id`)
-- @column rank INTEGER the rank within the run (`ranks.rank`)
-- @column plane VARCHAR the host plane's name, e.g. `/host:CPU`
-- @column thread VARCHAR the thread (line) name, e.g. `python`, `main/3116817`
-- @column name VARCHAR the TraceMe's name (a JAX `TraceAnnotation`'s text, `PjitFunction(prefill)`,
-- `backend_compile`, …)
-- @column start_ns BIGINT [ns] start on the trace's clock (see [Time base](#time-base))
-- @column dur_ns BIGINT [ns] duration
-- @column end_ns BIGINT [ns] `start_ns + dur_ns`
-- @column correlation_id BIGINT the event's `correlation_id` stat; NULL without one
-- @column args VARCHAR [JSON text] the event's stats (see [JSON-text
-- columns](#json-text-and-json-columns)); NULL when it has none
CREATE OR REPLACE VIEW tracemes AS
SELECT run_id, rank, pid AS plane, tid AS thread, name, start_ns, dur_ns, start_ns + dur_ns AS end_ns,
       correlation_id, args
FROM host_events WHERE category = 'traceme';

-- One row per CUPTI synchronization record (`cuda_sync`). From `host_events` (`category = 'sync'`).
-- @column run_id VARCHAR the run (`runs.run_id`)
-- @column rank INTEGER the rank within the run (`ranks.rank`)
-- @column pid VARCHAR the event's `pid` as text (the device, as Kineto writes GPU-timeline rows)
-- @column tid VARCHAR the event's `tid` as text (the stream)
-- @column name VARCHAR the sync record's kind, e.g. `Stream Sync`, `Event Sync`, `Stream Wait Event`
-- @column start_ns BIGINT [ns] start of the sync record
-- @column dur_ns BIGINT [ns] duration of the sync record
-- @column end_ns BIGINT [ns] `start_ns + dur_ns`
-- @column correlation_id BIGINT `args.correlation`: the id of the runtime call that synchronized
-- @column external_id BIGINT `args."External id"`
-- @column stream VARCHAR `args.stream`
-- @column device INTEGER `args.device`
CREATE OR REPLACE VIEW syncs AS
SELECT run_id, rank, pid, tid, name, start_ns, dur_ns, start_ns + dur_ns AS end_ns, correlation_id,
       external_id, stream, device
FROM host_events WHERE category = 'sync';

-- One row per device listed in a rank's `deviceProperties`, XPlane device plane, or AMD GPU agent. From
-- `device_meta`.
-- @column run_id VARCHAR = device_meta.run_id
-- @column rank INTEGER = device_meta.rank
-- @column device INTEGER = device_meta.device
-- @column name VARCHAR = device_meta.name
-- @column vendor VARCHAR = device_meta.vendor
-- @column arch VARCHAR = device_meta.arch
-- @column compute_units INTEGER = device_meta.compute_units
-- @column warp_size INTEGER = device_meta.warp_size
-- @column memory_bytes BIGINT = device_meta.memory_bytes
-- @column compute_major INTEGER = device_meta.compute_major
-- @column compute_minor INTEGER = device_meta.compute_minor
-- @column max_threads_per_block INTEGER = device_meta.max_threads_per_block
-- @column max_threads_per_cu INTEGER = device_meta.max_threads_per_cu
-- @column regs_per_block INTEGER = device_meta.regs_per_block
-- @column regs_per_cu INTEGER = device_meta.regs_per_cu
-- @column shared_mem_per_block_bytes BIGINT = device_meta.shared_mem_per_block_bytes
-- @column shared_mem_per_cu_bytes BIGINT = device_meta.shared_mem_per_cu_bytes
-- @column shared_mem_per_block_optin_bytes BIGINT = device_meta.shared_mem_per_block_optin_bytes
-- @column device_type VARCHAR = device_meta.device_type
-- @column clock_mhz DOUBLE = device_meta.clock_mhz
-- @column peak_tflops DOUBLE = device_meta.peak_tflops
-- @column peak_hbm_gbps DOUBLE = device_meta.peak_hbm_gbps
-- @column memory_bandwidth_gbps DOUBLE = device_meta.memory_bandwidth_gbps
-- @column xcc_count INTEGER = device_meta.xcc_count
-- @column simd_per_cu INTEGER = device_meta.simd_per_cu
-- @column max_waves_per_cu INTEGER = device_meta.max_waves_per_cu
-- @column properties JSON = device_meta.properties
CREATE OR REPLACE VIEW devices AS
SELECT run_id, rank, device, name, vendor, arch, compute_units, warp_size, memory_bytes,
       compute_major, compute_minor, max_threads_per_block, max_threads_per_cu, regs_per_block,
       regs_per_cu, shared_mem_per_block_bytes, shared_mem_per_cu_bytes,
       shared_mem_per_block_optin_bytes, device_type, clock_mhz, peak_tflops, peak_hbm_gbps,
       memory_bandwidth_gbps, xcc_count, simd_per_cu, max_waves_per_cu, properties
FROM device_meta;

-- One row per XLA op of a device plane with its compiler cost estimates (TPU). From `xla_op_costs`.
-- @column run_id VARCHAR = xla_op_costs.run_id
-- @column rank INTEGER = xla_op_costs.rank
-- @column device INTEGER = xla_op_costs.device
-- @column op_metadata_id BIGINT = xla_op_costs.op_metadata_id
-- @column name VARCHAR = xla_op_costs.name
-- @column hlo_text VARCHAR = xla_op_costs.hlo_text
-- @column hlo_category VARCHAR = xla_op_costs.hlo_category
-- @column program_id VARCHAR = xla_op_costs.program_id
-- @column flops DOUBLE = xla_op_costs.flops
-- @column model_flops DOUBLE = xla_op_costs.model_flops
-- @column bytes_accessed DOUBLE = xla_op_costs.bytes_accessed
-- @column raw_bytes_accessed DOUBLE = xla_op_costs.raw_bytes_accessed
-- @column hbm_read_bytes DOUBLE = xla_op_costs.hbm_read_bytes
-- @column hbm_write_bytes DOUBLE = xla_op_costs.hbm_write_bytes
-- @column memory_breakdown VARCHAR = xla_op_costs.memory_breakdown
-- @column shape_with_layout VARCHAR = xla_op_costs.shape_with_layout
-- @column tf_op VARCHAR = xla_op_costs.tf_op
-- @column deduplicated_name VARCHAR = xla_op_costs.deduplicated_name
-- @column source VARCHAR = xla_op_costs.source
CREATE OR REPLACE VIEW op_costs AS
SELECT * FROM xla_op_costs;

-- One row per execution of an XLA module on a device (XPlane `XLA Modules` line). From `host_events`
-- (`category = 'xla_module'`).
-- @column run_id VARCHAR the run (`runs.run_id`)
-- @column rank INTEGER the rank within the run (`ranks.rank`)
-- @column device INTEGER the plane's index
-- @column module_name VARCHAR the event name, e.g. `jit_f(12190760917235803885)`
-- @column module VARCHAR `module_name` without the trailing `(N)`, e.g. `jit_f` (note:
-- `xla_modules.function` also drops `jit_`). NULL when the name does not end in `(N)`
-- @column program_id VARCHAR the `N` of `(N)`, e.g. `12190760917235803885` (= `kernels.program_id`,
-- `xla_modules.fingerprint`). NULL when the name does not end in `(N)`
-- @column start_ns BIGINT [ns] start of the execution on the device line
-- @column dur_ns BIGINT [ns] duration of the execution on the device line
-- @column end_ns BIGINT [ns] `start_ns + dur_ns`
-- @column args VARCHAR [JSON text] the event's stats, e.g.
-- `{"run_id":3,"replica_id":0,"queue_id":0,"core_type":0,…}`
CREATE OR REPLACE VIEW module_executions AS
SELECT run_id, rank, device, name AS module_name,
       nullif(regexp_extract(name, '^(.*)\(([0-9]+)\)$', 1), '') AS module,
       nullif(regexp_extract(name, '^(.*)\(([0-9]+)\)$', 2), '') AS program_id,
       start_ns, dur_ns, start_ns + dur_ns AS end_ns, args
FROM host_events WHERE category = 'xla_module';

-- One row per compilation (JAX/XLA, torch.compile, torch_xla): the outermost of its nested compile spans
-- (see [compiles](#compiles)). From `host_events`.
-- @column run_id VARCHAR the run (`runs.run_id`)
-- @column rank INTEGER the rank within the run (`ranks.rank`)
-- @column name VARCHAR the outermost span's name
-- @column start_ns BIGINT [ns] start of the outermost span: the whole compilation
-- @column dur_ns BIGINT [ns] duration of the outermost span: the whole compilation
-- @column end_ns BIGINT [ns] `start_ns + dur_ns`
-- @column backend VARCHAR `jax` | `torch.compile` | `torch_xla` | `xla_cpu` | `xla_tpu` | `xla_gpu`, from
-- the span's name (table above)
-- @column pid VARCHAR the span's pid (XPlane: the plane name, `/host:CPU`)
-- @column tid VARCHAR the span's tid (XPlane: the thread name)
-- @column function VARCHAR what was compiled, the first of: `fn` of the innermost `PjitFunction(fn)` event
-- (JAX's dispatch) on the same pid and tid that encloses the span (e.g. `prefill`); the span's `name` stat
-- (`args.name`); `'frame F'`, F being the frame of `compile_id` (torch.compile, e.g. `frame 0`). NULL if
-- none applies
-- @column compile_id VARCHAR torch.compile: `F/N` (frame / recompile count, e.g. `0/1`), the smallest (as
-- text) `compile_id=F/N` found in the names of dynamo's marker events (`<stage>_data: …, compile_id=F/N`)
-- on the same tid that start within the span. NULL when there is none
-- @column backend_dur_ns BIGINT [ns] the longest compile span of another name nested in time in this one
-- (on any thread, whether or not it was folded into this row), e.g. `PjRtCpuClient::Compile` in JAX's
-- `backend_compile_and_load`, `TfrtTpuCompiler::Compile` in `backend_compile` on TPU, `backend_compile` in
-- torch.compile's `entire_frame_compile`; NULL if none
-- @column args VARCHAR [JSON text] the span's stats (XPlane); NULL for Kineto
CREATE OR REPLACE VIEW compiles AS
WITH events AS (  -- every span that is a compilation, at any level of the stack
    SELECT run_id, rank, pid, tid, name, start_ns, dur_ns, start_ns + dur_ns AS end_ns, args,
           CASE
             WHEN name IN ('backend_compile_and_load', 'backend_compile')
                  AND trace_category LIKE 'xplane:%' THEN 'jax'
             WHEN name IN ('entire_frame_compile', 'backend_compile', 'inductor_compile',
                           'compile_fx_inner') THEN 'torch.compile'
             WHEN name = 'PjRtComputationClient::Compile' THEN 'torch_xla'
             WHEN name = 'PjRtCpuClient::Compile' THEN 'xla_cpu'
             WHEN name IN ('TfrtTpuCompiler::Compile', 'TpuCompiler::Compile') THEN 'xla_tpu'
             WHEN name IN ('PjRtStreamExecutorClient::Compile', 'StreamExecutorGpuClient::Compile',
                           'PjRtCApiClient::Compile') THEN 'xla_gpu'
           END AS backend
    FROM host_events
    WHERE name IN ('backend_compile_and_load', 'backend_compile', 'entire_frame_compile',
                   'inductor_compile', 'compile_fx_inner', 'PjRtComputationClient::Compile',
                   'PjRtCpuClient::Compile', 'TfrtTpuCompiler::Compile', 'TpuCompiler::Compile',
                   'PjRtStreamExecutorClient::Compile', 'StreamExecutorGpuClient::Compile',
                   'PjRtCApiClient::Compile')
),
outermost AS (
    -- One row per compile. A compile span inside another one on the same thread is a stage of
    -- it (dynamo's backend_compile inside entire_frame_compile); an XLA backend compile on a
    -- compiler thread inside a framework-level compile (JAX, torch_xla) is that compile's
    -- backend. Framework-level compiles on different threads stay separate compiles.
    SELECT e.* FROM events e
    WHERE NOT EXISTS (
        SELECT 1 FROM events o
        WHERE o.run_id = e.run_id AND o.rank = e.rank
          AND o.start_ns <= e.start_ns AND o.end_ns >= e.end_ns
          AND (o.start_ns, o.end_ns, o.name) <> (e.start_ns, e.end_ns, e.name)
          AND (o.dur_ns > e.dur_ns OR (o.dur_ns = e.dur_ns AND o.name < e.name))
          AND ((o.pid = e.pid AND o.tid = e.tid)
               OR (o.backend IN ('jax', 'torch_xla')
                   AND e.backend IN ('xla_cpu', 'xla_tpu', 'xla_gpu'))))
),
dispatch AS (  -- JAX: the jitted function being dispatched on the compiling thread
    SELECT run_id, rank, pid, tid, start_ns, start_ns + dur_ns AS end_ns, dur_ns,
           regexp_extract(name, '^PjitFunction\((.*)\)$', 1) AS function
    FROM host_events WHERE name LIKE 'PjitFunction(%'
),
markers AS (  -- torch.compile: dynamo's "<stage>_data: ..., compile_id=F/N" markers
    SELECT run_id, rank, tid, start_ns, regexp_extract(name, 'compile_id=([0-9]+/[0-9]+)', 1) AS compile_id
    FROM host_events WHERE name LIKE '%compile_id=%'
)
SELECT k.run_id, k.rank, k.name, k.start_ns, k.dur_ns, k.end_ns, k.backend, k.pid, k.tid,
       coalesce(
         (SELECT d.function FROM dispatch d
           WHERE d.run_id = k.run_id AND d.rank = k.rank AND d.pid = k.pid AND d.tid = k.tid
             AND d.start_ns <= k.start_ns AND d.end_ns >= k.end_ns
           ORDER BY d.dur_ns LIMIT 1),
         json_extract_string(k.args, '$.name'),
         (SELECT 'frame ' || split_part(min(m.compile_id), '/', 1) FROM markers m
           WHERE m.run_id = k.run_id AND m.rank = k.rank AND m.tid = k.tid
             AND m.start_ns BETWEEN k.start_ns AND k.end_ns)) AS function,
       (SELECT min(m.compile_id) FROM markers m
         WHERE m.run_id = k.run_id AND m.rank = k.rank AND m.tid = k.tid
           AND m.start_ns BETWEEN k.start_ns AND k.end_ns) AS compile_id,
       (SELECT max(b.dur_ns) FROM events b
         WHERE b.run_id = k.run_id AND b.rank = k.rank AND b.name <> k.name
           AND b.start_ns >= k.start_ns AND b.end_ns <= k.end_ns) AS backend_dur_ns,
       k.args
FROM outermost k;

-- One row per compiled XLA module listed in an XPlane's `/host:metadata`. From `xla_module_meta` (⟕
-- `compiles`).
-- @column run_id VARCHAR = xla_module_meta.run_id
-- @column rank INTEGER = xla_module_meta.rank
-- @column module_name VARCHAR = xla_module_meta.module_name
-- @column function VARCHAR = xla_module_meta.function
-- @column fingerprint VARCHAR = xla_module_meta.fingerprint
-- @column module_id BIGINT = xla_module_meta.module_id
-- @column entry_signature VARCHAR = xla_module_meta.entry_signature
-- @column param_shapes VARCHAR = xla_module_meta.param_shapes
-- @column result_shape VARCHAR = xla_module_meta.result_shape
-- @column hlo_proto_bytes BIGINT = xla_module_meta.hlo_proto_bytes
-- @column compiled_in_window BOOLEAN **heuristic**: true for the N modules of a function with the highest
-- `module_id`, N being the number of [`compiles`](#compiles) rows of the same run, rank and `function` in
-- the capture. XLA gives modules increasing ids within a process, so the last N compiled are taken to be
-- the N compiles seen. Only meaningful when the compile's `function` (the `PjitFunction` name) matches the
-- module's; false for all modules of a function with no compile in the window
CREATE OR REPLACE VIEW xla_modules AS
WITH compiled AS (
    SELECT run_id, rank, function, count(*) AS n_compiles FROM compiles GROUP BY ALL
)
SELECT m.run_id, m.rank, m.module_name, m.function, m.fingerprint, m.module_id,
       m.entry_signature, m.param_shapes, m.result_shape, m.hlo_proto_bytes,
       row_number() OVER (PARTITION BY m.run_id, m.rank, m.function ORDER BY m.module_id DESC)
         <= coalesce(c.n_compiles, 0) AS compiled_in_window
FROM xla_module_meta m
LEFT JOIN compiled c ON c.run_id = m.run_id AND c.rank = m.rank AND c.function = m.function;

-- One row per run with a model attached: the model and the per-rank constants of the step cost model
-- ([findings.md](findings.md#model-aware-step-costing)). From `model_rows`.
-- @column run_id VARCHAR = model_rows.run_id
-- @column model VARCHAR = model_rows.model
-- @column origin VARCHAR = model_rows.origin
-- @column spec JSON = model_rows.spec
-- @column tensor_parallel INTEGER = model_rows.tensor_parallel
-- @column tp_source VARCHAR = model_rows.tp_source
-- @column weight_bytes_fixed DOUBLE [bytes] weights every step reads: attention, dense MLP, shared experts,
-- router, norms, LM head (not the input embedding)
-- @column expert_bytes DOUBLE [bytes] one routed expert over all MoE layers
-- @column num_experts INTEGER routed experts per MoE layer (0: dense)
-- @column experts_per_token INTEGER top-k
-- @column kv_bytes_per_token_global DOUBLE [bytes] KV cache of one token over the global-attention layers
-- (MLA: the latent)
-- @column kv_bytes_per_token_window DOUBLE [bytes] the same over the sliding-window layers
-- @column sliding_window BIGINT [tokens] 0 = none
-- @column flops_per_token DOUBLE [FLOP] 2 × active parameters less the LM head
-- @column lm_head_flops_per_seq DOUBLE [FLOP] 2 × vocab × hidden: once per sequence that samples
-- @column attn_flops_per_pair_global DOUBLE [FLOP] QKᵀ + PV of one query-key pair, summed over the global
-- layers
-- @column attn_flops_per_pair_window DOUBLE [FLOP] the same over the window layers
-- @column activation_bytes_per_token DOUBLE [bytes] hidden-state traffic between kernels per token
-- (estimate)
-- @column embedding_bytes DOUBLE [bytes] the input embedding table: resident, not read by a step (0 when
-- tied to the LM head)
-- @column attached_at TIMESTAMP = model_rows.attached_at
CREATE OR REPLACE VIEW run_models AS
SELECT run_id, model, origin, spec, tensor_parallel, tp_source,
       UNNEST(json_transform(constants, '{
           "weight_bytes_fixed": "DOUBLE", "expert_bytes": "DOUBLE",
           "num_experts": "INTEGER", "experts_per_token": "INTEGER",
           "kv_bytes_per_token_global": "DOUBLE", "kv_bytes_per_token_window": "DOUBLE",
           "sliding_window": "BIGINT", "flops_per_token": "DOUBLE", "lm_head_flops_per_seq": "DOUBLE",
           "attn_flops_per_pair_global": "DOUBLE", "attn_flops_per_pair_window": "DOUBLE",
           "activation_bytes_per_token": "DOUBLE", "embedding_bytes": "DOUBLE"}')),
       attached_at
FROM model_rows;

-- One row per trace file (one rank, process or host) of a run. From `rank_meta`.
-- @column run_id VARCHAR = rank_meta.run_id
-- @column rank INTEGER = rank_meta.rank
-- @column world_size INTEGER = rank_meta.world_size
-- @column dist_backend VARCHAR = rank_meta.dist_backend
-- @column rank_source VARCHAR = rank_meta.rank_source
-- @column host VARCHAR = rank_meta.host
-- @column path VARCHAR = rank_meta.path
-- @column file_sha256 VARCHAR = rank_meta.file_sha256
-- @column schema_version INTEGER = rank_meta.schema_version
-- @column trace_id VARCHAR = rank_meta.trace_id
-- @column base_time_ns BIGINT = rank_meta.base_time_ns
-- @column display_time_unit VARCHAR = rank_meta.display_time_unit
-- @column runtime VARCHAR = rank_meta.runtime
-- @column runtime_version VARCHAR = rank_meta.runtime_version
-- @column trace_metadata JSON = rank_meta.trace_metadata
-- @column n_trace_events BIGINT = rank_meta.n_trace_events
-- @column n_python_events BIGINT = rank_meta.n_python_events
-- @column n_flow_events BIGINT = rank_meta.n_flow_events
-- @column n_other_skipped BIGINT = rank_meta.n_other_skipped
-- @column first_ns BIGINT = rank_meta.first_ns
-- @column last_ns BIGINT = rank_meta.last_ns
-- @column n_invalid_events BIGINT = rank_meta.n_invalid_events
CREATE OR REPLACE VIEW ranks AS
SELECT run_id, rank, world_size, dist_backend, rank_source, host, path, file_sha256, schema_version,
       trace_id, base_time_ns, display_time_unit, runtime, runtime_version, trace_metadata,
       n_trace_events, n_python_events, n_flow_events, n_other_skipped, first_ns, last_ns,
       n_invalid_events
FROM rank_meta;
