"""The tracekit store: one embedded DuckDB file with one versioned schema.

Base tables hold what the parsers write; the *views* ``runs``, ``kernels``, ``ops``,
``runtime_calls``, ``launches``, ``kernel_ops``, ``graph_launches``, ``annotations``, ``syncs``,
``devices``, ``ranks``, ``counters``, ``pc_samples``, ``compiles``, ``op_costs``, ``xla_modules``,
``module_executions`` and ``requests``
are the public contract that tests, the dashboard, CI alerts and outside scripts query.
Columns may be added to them; existing names never change. ``docs/schema.md`` documents every
column with its unit.

Concurrency: DuckDB allows one read-write process per file. A second writer waits for the lock
(up to ``lock_timeout_s`` seconds, default 600, or ``TRACEKIT_LOCK_TIMEOUT``) and then fails with
a clear message; it never corrupts the store. Readers open the file read-only.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from tracekit.errors import ConfigError, StoreError, StoreLockedError, TraceInputError
from tracekit.limits import memory_limit_setting, temp_dir

#: Version of the schema this code writes. Bump it and add a step to ``MIGRATIONS`` together.
SCHEMA_VERSION = 4

DEFAULT_STORE = "tracekit.duckdb"

#: Base tables of schema 1. Times are integer nanoseconds on the trace's own clock.
_TABLES_V1 = """
CREATE TABLE tracekit_schema (
    version     INTEGER NOT NULL,
    migrated_at TIMESTAMP NOT NULL
);
CREATE TABLE run_meta (
    run_id          VARCHAR PRIMARY KEY,
    content_sha256  VARCHAR NOT NULL UNIQUE,
    source          VARCHAR NOT NULL,
    format          VARCHAR NOT NULL,
    vendor          VARCHAR NOT NULL,
    device_name     VARCHAR,
    label           VARCHAR,
    workload        VARCHAR,
    captured_at     TIMESTAMP,
    ingested_at     TIMESTAMP NOT NULL,
    tags            MAP(VARCHAR, VARCHAR),
    n_files         INTEGER NOT NULL,
    n_ranks         INTEGER NOT NULL,
    input_bytes     BIGINT NOT NULL,
    n_trace_events  BIGINT NOT NULL,
    n_skipped_events BIGINT NOT NULL,
    tracekit_version VARCHAR NOT NULL
);
CREATE TABLE rank_meta (
    run_id          VARCHAR NOT NULL,
    rank            INTEGER NOT NULL,
    world_size      INTEGER,
    dist_backend    VARCHAR,
    rank_source     VARCHAR NOT NULL,
    host            VARCHAR,
    path            VARCHAR NOT NULL,
    file_sha256     VARCHAR NOT NULL,
    schema_version  INTEGER,
    trace_id        VARCHAR,
    base_time_ns    BIGINT,
    display_time_unit VARCHAR,
    runtime         VARCHAR,
    runtime_version VARCHAR,
    trace_metadata  JSON,
    n_trace_events  BIGINT NOT NULL,
    n_python_events BIGINT NOT NULL,
    n_flow_events   BIGINT NOT NULL,
    n_other_skipped BIGINT NOT NULL,
    first_ns        BIGINT,
    last_ns         BIGINT
);
CREATE TABLE device_meta (
    run_id          VARCHAR NOT NULL,
    rank            INTEGER NOT NULL,
    device          INTEGER NOT NULL,
    name            VARCHAR,
    vendor          VARCHAR,
    arch            VARCHAR,
    compute_units   INTEGER,
    warp_size       INTEGER,
    memory_bytes    BIGINT,
    compute_major   INTEGER,
    compute_minor   INTEGER,
    max_threads_per_block INTEGER,
    max_threads_per_cu INTEGER,
    regs_per_block  INTEGER,
    regs_per_cu     INTEGER,
    shared_mem_per_block_bytes BIGINT,
    shared_mem_per_cu_bytes BIGINT,
    shared_mem_per_block_optin_bytes BIGINT,
    device_type     VARCHAR,
    clock_mhz       DOUBLE,
    peak_tflops     DOUBLE,
    peak_hbm_gbps   DOUBLE,
    memory_bandwidth_gbps DOUBLE,
    xcc_count       INTEGER,
    simd_per_cu     INTEGER,
    max_waves_per_cu INTEGER,
    properties      JSON
);
CREATE TABLE device_activity (
    run_id          VARCHAR NOT NULL,
    rank            INTEGER NOT NULL,
    device          INTEGER,
    stream          VARCHAR,
    category        VARCHAR NOT NULL,
    name            VARCHAR NOT NULL,
    start_ns        BIGINT NOT NULL,
    dur_ns          BIGINT NOT NULL,
    correlation_id  BIGINT,
    external_id     BIGINT,
    trace_category  VARCHAR NOT NULL,
    pid             VARCHAR,
    tid             VARCHAR,
    grid_x INTEGER, grid_y INTEGER, grid_z INTEGER,
    block_x INTEGER, block_y INTEGER, block_z INTEGER,
    registers_per_thread INTEGER,
    shared_mem_bytes BIGINT,
    blocks_per_cu   DOUBLE,
    warps_per_cu    DOUBLE,
    est_occupancy_pct DOUBLE,
    bytes           BIGINT,
    bandwidth_gbps  DOUBLE,
    kind            VARCHAR,
    collective_name VARCHAR,
    in_msg_nelems   BIGINT,
    out_msg_nelems  BIGINT,
    group_size      INTEGER,
    dtype           VARCHAR,
    device_start_ns BIGINT,
    device_dur_ns   BIGINT,
    op_metadata_id  BIGINT,
    hlo_module      VARCHAR,
    hlo_category    VARCHAR,
    program_id      VARCHAR,
    flops           DOUBLE,
    model_flops     DOUBLE,
    bytes_accessed  DOUBLE,
    hbm_bytes       DOUBLE,
    args            VARCHAR,
    dispatch_id     BIGINT,
    queue_id        VARCHAR,
    scratch_bytes   BIGINT,
    vgpr_count      INTEGER,
    accum_vgpr_count INTEGER,
    sgpr_count      INTEGER
);
CREATE TABLE host_events (
    run_id          VARCHAR NOT NULL,
    rank            INTEGER NOT NULL,
    pid             VARCHAR,
    tid             VARCHAR,
    category        VARCHAR NOT NULL,
    trace_category  VARCHAR NOT NULL,
    name            VARCHAR NOT NULL,
    start_ns        BIGINT NOT NULL,
    dur_ns          BIGINT NOT NULL,
    correlation_id  BIGINT,
    external_id     BIGINT,
    sequence_number BIGINT,
    fwd_thread_id   BIGINT,
    input_dims      VARCHAR,
    input_types     VARCHAR,
    input_strides   VARCHAR,
    concrete_inputs VARCHAR,
    flops           DOUBLE,
    stream          VARCHAR,
    device          INTEGER,
    cbid            INTEGER,
    collective_name VARCHAR,
    in_msg_nelems   BIGINT,
    out_msg_nelems  BIGINT,
    group_size      INTEGER,
    dtype           VARCHAR,
    args            VARCHAR
);
CREATE TABLE xla_op_costs (
    run_id          VARCHAR NOT NULL,
    rank            INTEGER NOT NULL,
    device          INTEGER NOT NULL,
    op_metadata_id  BIGINT NOT NULL,
    name            VARCHAR,
    hlo_text        VARCHAR,
    hlo_category    VARCHAR,
    program_id      VARCHAR,
    flops           DOUBLE,
    model_flops     DOUBLE,
    bytes_accessed  DOUBLE,
    raw_bytes_accessed DOUBLE,
    hbm_read_bytes  DOUBLE,
    hbm_write_bytes DOUBLE,
    memory_breakdown VARCHAR,
    shape_with_layout VARCHAR,
    tf_op           VARCHAR,
    deduplicated_name VARCHAR,
    source          VARCHAR
);
CREATE TABLE counter_values (
    run_id          VARCHAR NOT NULL,
    rank            INTEGER NOT NULL,
    device          INTEGER,
    correlation_id  BIGINT,
    dispatch_id     BIGINT,
    kernel_name     VARCHAR,
    counter         VARCHAR NOT NULL,
    value           DOUBLE,
    pass            VARCHAR
);
CREATE TABLE finding_rows (
    run_id          VARCHAR NOT NULL,
    analyzer        VARCHAR NOT NULL,
    severity        VARCHAR NOT NULL,
    title           VARCHAR NOT NULL,
    detail          VARCHAR NOT NULL,
    evidence        JSON,
    saving_ns       BIGINT,
    saving_fraction DOUBLE,
    analyzed_at     TIMESTAMP NOT NULL
);
CREATE TABLE metric_rows (
    run_id          VARCHAR NOT NULL,
    analyzer        VARCHAR NOT NULL,
    name            VARCHAR NOT NULL,
    value           DOUBLE,
    unit            VARCHAR NOT NULL,
    better          VARCHAR NOT NULL,
    analyzed_at     TIMESTAMP NOT NULL
);
CREATE TABLE token_length_rows (
    run_id          VARCHAR NOT NULL,
    request         INTEGER NOT NULL,
    real_tokens     BIGINT NOT NULL,
    padded_tokens   BIGINT NOT NULL,
    source          VARCHAR NOT NULL
);
CREATE TABLE request_rows (  -- load driver: one row per request (tracekit.collectors.load)
    run_id          VARCHAR NOT NULL,
    request_id      BIGINT NOT NULL,
    start_ns        BIGINT NOT NULL,   -- Unix ns
    ttft_ns         BIGINT,
    e2e_ns          BIGINT NOT NULL,
    prompt_tokens   BIGINT,
    output_tokens   BIGINT NOT NULL,
    itl_ns          BIGINT[] NOT NULL,
    status          INTEGER,
    error           VARCHAR,
    token_count_source VARCHAR NOT NULL
);
CREATE TABLE pc_sample_rows (
    run_id          VARCHAR NOT NULL,
    rank            INTEGER NOT NULL,
    device          INTEGER,
    dispatch_id     BIGINT,
    correlation_id  BIGINT,
    timestamp_ns    BIGINT,
    method          VARCHAR NOT NULL,
    exec_mask       UBIGINT,
    instruction     VARCHAR,
    instruction_comment VARCHAR,
    wave_issued     BOOLEAN,
    instruction_type VARCHAR,
    stall_reason    VARCHAR,
    wave_count      INTEGER
);
CREATE TABLE xla_module_meta (
    run_id          VARCHAR NOT NULL,
    rank            INTEGER NOT NULL,
    module_name     VARCHAR NOT NULL,
    function        VARCHAR,
    fingerprint     VARCHAR,
    module_id       BIGINT,
    entry_signature VARCHAR,
    param_shapes    VARCHAR,
    result_shape    VARCHAR,
    hlo_proto_bytes BIGINT
);
"""

#: Tables added in schema 3: the model a run served (issue 15: model-aware step costing).
_TABLES_V3 = """
CREATE TABLE model_rows (  -- the model a run served, attached with --model (tracekit.api.attach_model)
    run_id          VARCHAR PRIMARY KEY,
    model           VARCHAR NOT NULL,  -- catalog name, or the config.json's folder name
    origin          VARCHAR NOT NULL,  -- catalog | config.json
    spec            JSON NOT NULL,     -- tracekit.analysis.models.ModelSpec as JSON
    tensor_parallel INTEGER NOT NULL,  -- ranks the weights are split over
    tp_source       VARCHAR NOT NULL,  -- what said so: --tp, or the trace's world size
    constants       JSON NOT NULL,     -- ModelSpec.step_constants(tensor_parallel) at attach time
    attached_at     TIMESTAMP NOT NULL
);
"""

#: Schema 4: events dropped at ingest because physics forbids them (a negative duration, an end
#: before its start, a time more than a day from the rest of its rank), per rank and per run.
_COLUMNS_V4 = """
ALTER TABLE rank_meta ADD COLUMN n_invalid_events BIGINT DEFAULT 0;
ALTER TABLE run_meta ADD COLUMN n_invalid_events BIGINT DEFAULT 0;
"""

#: The public views. Recreated by every migration so that they always match the base tables.
_VIEWS = """
CREATE OR REPLACE VIEW runs AS
SELECT run_id, source, format, vendor, device_name, label, workload, captured_at, ingested_at,
       tags, content_sha256, n_files, n_ranks, input_bytes, n_trace_events, n_skipped_events,
       tracekit_version, n_invalid_events
FROM run_meta;

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

CREATE OR REPLACE VIEW findings AS
SELECT run_id, analyzer, severity, title, detail, evidence, saving_ns, saving_fraction, analyzed_at
FROM finding_rows;

CREATE OR REPLACE VIEW metrics AS
SELECT run_id, name, value, unit, better, analyzer, analyzed_at FROM metric_rows;

CREATE OR REPLACE VIEW token_lengths AS  -- real vs padded tokens per request (a lengths file)
SELECT run_id, request, real_tokens, padded_tokens, source FROM token_length_rows;

CREATE OR REPLACE VIEW requests AS  -- load-driver requests: latencies in ns, start in Unix ns
SELECT run_id, request_id, start_ns, ttft_ns, e2e_ns, start_ns + e2e_ns AS end_ns, prompt_tokens,
       output_tokens, itl_ns, status, error, token_count_source,
       CASE WHEN error IS NULL AND ttft_ns IS NOT NULL AND output_tokens > 1
            THEN (e2e_ns - ttft_ns) / (output_tokens - 1) END AS tpot_ns
FROM request_rows;

CREATE OR REPLACE VIEW pc_samples AS  -- AMD PC samples (rocprofv3 --pc-sampling-*), with their kernel
SELECT p.run_id, p.rank, coalesce(p.device, k.device) AS device, p.dispatch_id, p.correlation_id,
       k.name AS kernel_name, p.timestamp_ns, p.method, p.exec_mask, p.instruction,
       p.instruction_comment, p.wave_issued, p.instruction_type, p.stall_reason, p.wave_count
FROM pc_sample_rows p
LEFT JOIN (SELECT run_id, rank, dispatch_id, any_value(name) AS name, any_value(device) AS device
           FROM device_activity WHERE category = 'kernel' AND dispatch_id IS NOT NULL GROUP BY ALL) k
  ON k.run_id = p.run_id AND k.rank = p.rank AND k.dispatch_id = p.dispatch_id;

CREATE OR REPLACE VIEW counters AS
SELECT run_id, rank, device, correlation_id, dispatch_id, kernel_name, counter, value, pass
FROM counter_values;

CREATE OR REPLACE VIEW ops AS
SELECT run_id, rank, pid, tid, name, start_ns, dur_ns, start_ns + dur_ns AS end_ns,
       external_id, sequence_number, fwd_thread_id, input_dims, input_types, input_strides,
       concrete_inputs, flops, stream AS triton_stream, trace_category,
       collective_name, in_msg_nelems, out_msg_nelems, group_size, dtype
FROM host_events WHERE category = 'op';

CREATE OR REPLACE VIEW runtime_calls AS
-- api_kind is classified once per distinct (run, name), not per call: the regexes per row were
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

CREATE OR REPLACE VIEW launches AS
SELECT r.run_id, r.rank, r.name AS api_name, r.api_kind, r.start_ns AS api_start_ns,
       r.dur_ns AS api_dur_ns, k.correlation_id, k.name AS kernel_name, k.category,
       k.device, k.stream, k.start_ns, k.dur_ns,
       k.start_ns - (r.start_ns + r.dur_ns) AS launch_delay_ns
FROM runtime_calls r
JOIN device_activity k
  ON k.run_id = r.run_id AND k.rank = r.rank AND k.correlation_id = r.correlation_id;

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

CREATE OR REPLACE VIEW annotations AS
SELECT run_id, rank, pid, tid, name, start_ns, dur_ns, start_ns + dur_ns AS end_ns, external_id,
       category = 'gpu_annotation' OR (category = 'step' AND device IS NOT NULL) AS on_device,
       category = 'step' OR regexp_matches(name, '^ProfilerStep#[0-9]+$') AS is_profiler_step,
       TRY_CAST(json_extract_string(args, '$.step_num') AS BIGINT) AS step_num
FROM host_events
WHERE category IN ('annotation', 'gpu_annotation', 'step')
   OR (category = 'op' AND regexp_matches(name, '^ProfilerStep#[0-9]+$'));  -- 2021 schema

CREATE OR REPLACE VIEW device_spans AS  -- device-side spans that are not activities (XPlane)
SELECT run_id, rank, device, pid AS plane, tid AS line, category, name, start_ns, dur_ns,
       start_ns + dur_ns AS end_ns, args
FROM host_events WHERE device IS NOT NULL AND category IN
    ('xla_module', 'device_traceme', 'step', 'framework_op', 'name_scope', 'source', 'host_offload_op');

CREATE OR REPLACE VIEW tracemes AS  -- XPlane host TraceMe events (JAX TraceAnnotation included)
SELECT run_id, rank, pid AS plane, tid AS thread, name, start_ns, dur_ns, start_ns + dur_ns AS end_ns,
       correlation_id, args
FROM host_events WHERE category = 'traceme';

CREATE OR REPLACE VIEW syncs AS
SELECT run_id, rank, pid, tid, name, start_ns, dur_ns, start_ns + dur_ns AS end_ns, correlation_id,
       external_id, stream, device
FROM host_events WHERE category = 'sync';

CREATE OR REPLACE VIEW devices AS
SELECT run_id, rank, device, name, vendor, arch, compute_units, warp_size, memory_bytes,
       compute_major, compute_minor, max_threads_per_block, max_threads_per_cu, regs_per_block,
       regs_per_cu, shared_mem_per_block_bytes, shared_mem_per_cu_bytes,
       shared_mem_per_block_optin_bytes, device_type, clock_mhz, peak_tflops, peak_hbm_gbps,
       memory_bandwidth_gbps, xcc_count, simd_per_cu, max_waves_per_cu, properties
FROM device_meta;

CREATE OR REPLACE VIEW op_costs AS
SELECT * FROM xla_op_costs;

CREATE OR REPLACE VIEW module_executions AS
SELECT run_id, rank, device, name AS module_name,
       nullif(regexp_extract(name, '^(.*)\\(([0-9]+)\\)$', 1), '') AS module,
       nullif(regexp_extract(name, '^(.*)\\(([0-9]+)\\)$', 2), '') AS program_id,
       start_ns, dur_ns, start_ns + dur_ns AS end_ns, args
FROM host_events WHERE category = 'xla_module';

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
           regexp_extract(name, '^PjitFunction\\((.*)\\)$', 1) AS function
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

CREATE OR REPLACE VIEW run_models AS  -- per-rank constants of the step cost model (docs/findings.md)
SELECT run_id, model, origin, spec, tensor_parallel, tp_source,
       (constants->>'weight_bytes_fixed')::DOUBLE AS weight_bytes_fixed,
       (constants->>'expert_bytes')::DOUBLE AS expert_bytes,
       (constants->>'num_experts')::INTEGER AS num_experts,
       (constants->>'experts_per_token')::INTEGER AS experts_per_token,
       (constants->>'kv_bytes_per_token_global')::DOUBLE AS kv_bytes_per_token_global,
       (constants->>'kv_bytes_per_token_window')::DOUBLE AS kv_bytes_per_token_window,
       (constants->>'sliding_window')::BIGINT AS sliding_window,
       (constants->>'flops_per_token')::DOUBLE AS flops_per_token,
       (constants->>'lm_head_flops_per_seq')::DOUBLE AS lm_head_flops_per_seq,
       (constants->>'attn_flops_per_pair_global')::DOUBLE AS attn_flops_per_pair_global,
       (constants->>'attn_flops_per_pair_window')::DOUBLE AS attn_flops_per_pair_window,
       (constants->>'activation_bytes_per_token')::DOUBLE AS activation_bytes_per_token,
       (constants->>'embedding_bytes')::DOUBLE AS embedding_bytes,
       attached_at
FROM model_rows;

CREATE OR REPLACE VIEW ranks AS
SELECT run_id, rank, world_size, dist_backend, rank_source, host, path, file_sha256, schema_version,
       trace_id, base_time_ns, display_time_unit, runtime, runtime_version, trace_metadata,
       n_trace_events, n_python_events, n_flow_events, n_other_skipped, first_ns, last_ns,
       n_invalid_events
FROM rank_meta;
"""

#: ``MIGRATIONS[v]`` upgrades a store from schema ``v`` to ``v + 1`` inside one transaction.
#: Views are recreated after the last step, so a step only changes base tables.
Migration = Callable[[duckdb.DuckDBPyConnection], None]


def _add_model_rows(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(_TABLES_V3)


def _add_invalid_counts(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(_COLUMNS_V4)


MIGRATIONS: dict[int, Migration] = {
    1: lambda con: None,  # 1 → 2: views only (runtime_calls classifies api_kind per distinct name)
    2: _add_model_rows,  # 2 → 3: model_rows (the model a run served)
    3: _add_invalid_counts,  # 3 → 4: n_invalid_events of rank_meta and run_meta
}

_RUN_TABLES = (
    "device_activity", "host_events", "device_meta", "rank_meta", "xla_op_costs", "xla_module_meta",
    "counter_values", "pc_sample_rows", "finding_rows", "metric_rows", "token_length_rows", "request_rows", "model_rows", "run_meta",
)


def utc_now() -> dt.datetime:
    """Current UTC time as a naive datetime (all TIMESTAMP columns of the store are UTC)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def default_store_path() -> Path:
    """The store used when no ``--store`` is given: ``$TRACEKIT_STORE`` or ``./tracekit.duckdb``."""
    return Path(os.environ.get("TRACEKIT_STORE") or DEFAULT_STORE)


def _lock_timeout_s() -> float:
    try:
        return float(os.environ.get("TRACEKIT_LOCK_TIMEOUT", "600"))
    except ValueError:
        return 600.0


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "lock" in text.lower() and ("Conflicting" in text or "Could not set lock" in text)


def connect(
    path: str | Path,
    *,
    read_only: bool = False,
    lock_timeout_s: float | None = None,
    on_wait: Callable[[], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """Open the store at ``path``, waiting up to ``lock_timeout_s`` seconds for another writer.

    A writable connection creates the file and the schema if needed and migrates an older schema.
    A read-only connection refuses a missing store and runs with external access disabled, so a
    query can neither write files nor attach other databases.
    """
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(path, "no such store (ingest a trace first, or pass --store)")
    timeout = _lock_timeout_s() if lock_timeout_s is None else lock_timeout_s
    # A writer runs DuckDB on one thread: ingest keeps another core busy decompressing and
    # decoding the next chunk, and one thread keeps peak memory low (benchmarks/, 2 cores).
    # Readers (queries, dashboard) use every core.
    # DuckDB holds an uncommitted transaction in memory up to its limit and writes row groups out
    # past it: 512 MB cut the peak RSS of a 1M-dispatch rocpd ingest from 770 to 470 MB, and made
    # it faster (benchmarks/). TRACEKIT_MEMORY_LIMIT overrides it (a DuckDB size, e.g. "2GB").
    config: dict[str, str | bool | int | float | list[str]] = {
        "threads": 1,
        "memory_limit": memory_limit_setting(),
    }
    if not read_only:
        # A writer checkpoints at each COMMIT (threshold 1 KB) rather than at close: the data is
        # written to the file once instead of to the WAL and then the file, the store never needs
        # a WAL replay, and an 837k-event XPlane ingest's commit + close took 57 ms instead of 77.
        config["checkpoint_threshold"] = "1KB"
    else:
        config["threads"] = max(1, os.cpu_count() or 1)
        config["enable_external_access"] = False
        # DuckDB lets a connection write its temp directory even without external access; by
        # default that is `<store>.tmp/`, next to the store. A reader spills into a private
        # directory instead, removed when the connection is closed by open_store or collected.
        config["temp_directory"] = str(_private_spill_dir())
    try:
        if read_only and _is_zero_bytes(path):
            # a 0-byte file: a first ingest of an older tracekit killed before DuckDB wrote its
            # header. Read as a store without runs (_blank_store; the next ingest makes it real).
            con = duckdb.connect(":memory:", config=config)
        else:
            if not read_only:
                _create_store(path, config)
            con = _connect_waiting(path, read_only, config, timeout, on_wait)
    except BaseException:
        if "temp_directory" in config:
            shutil.rmtree(str(config["temp_directory"]), ignore_errors=True)
        raise
    if "temp_directory" in config:
        _SPILL_DIRS[con] = weakref.finalize(con, shutil.rmtree, str(config["temp_directory"]), True)
    try:
        # no progress bar on stderr, even when Python runs with -c (DuckDB then thinks it is
        # interactive): the CLI draws its own, and --json output must stay clean
        con.execute("SET enable_progress_bar = false")
        if read_only:
            version = _schema_version(con)
            if version is None:
                if not _is_blank(con):
                    raise StoreError(path, "not a tracekit store (no tracekit_schema table)")
                con = _blank_store(con, config)  # a blank DuckDB file (an interrupted first ingest)
            else:
                _check_version(path, version)
        else:
            ensure_schema(con, path)
    except duckdb.Error as exc:
        close(con)
        raise StoreError(path, f"cannot use the store: {first_line(exc)}") from None
    except BaseException:
        close(con)
        raise
    return con


def _private_spill_dir() -> Path:
    """A new ``tracekit-query-<pid>-*`` directory in the temp dir, for one reader's spills. Those
    of processes that no longer run (killed before they could remove theirs) are removed first."""
    base = temp_dir()
    try:
        for old in base.glob("tracekit-query-*-*"):
            pid = old.name.split("-")[2]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        return Path(tempfile.mkdtemp(prefix=f"tracekit-query-{os.getpid()}-", dir=base))
    except OSError as exc:
        raise ConfigError("TRACEKIT_TMPDIR" if os.environ.get("TRACEKIT_TMPDIR") else "temp directory",
                          f"{base}: cannot create a private directory for query spills "
                          f"({exc.strerror or exc})") from None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


#: Private spill directories of read-only connections, removed by :func:`close`.
_SPILL_DIRS: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, Any] = (
    weakref.WeakKeyDictionary())


def close(con: duckdb.DuckDBPyConnection) -> None:
    """Close a connection from :func:`connect` and remove its private spill directory."""
    con.close()
    fin = _SPILL_DIRS.pop(con, None)
    if fin is not None:
        fin()


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (DuckDB adds context lines such as ``LINE 1:``)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _connect_waiting(path: Path, read_only: bool, config: dict[str, str | bool | int | float | list[str]],
                     timeout: float, on_wait: Callable[[], None] | None) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout
    warned = False
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.IOException as exc:
            if not _is_lock_error(exc):
                raise StoreError(path, f"cannot open store: {first_line(exc)}") from None
            if time.monotonic() >= deadline:
                raise StoreLockedError(
                    path,
                    f"store is locked by another tracekit process (waited {timeout:g} s; "
                    "set TRACEKIT_LOCK_TIMEOUT to wait longer)",
                ) from None
            if not warned:
                warned = True
                if on_wait is not None:
                    on_wait()
            time.sleep(0.2)
        except duckdb.Error as exc:
            raise StoreError(path, f"not a tracekit store: {first_line(exc)}") from None


def lock_wait_notice(path: str | Path, timeout_s: float | None = None) -> str:
    """The one line printed (on stderr) when a command starts waiting for the store's lock."""
    timeout = _lock_timeout_s() if timeout_s is None else timeout_s
    return (f"waiting for the lock on {path}: another tracekit process is writing the store "
            f"(waiting up to {timeout:g} s; TRACEKIT_LOCK_TIMEOUT sets how long)")


def _is_zero_bytes(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size == 0
    except OSError:
        return False


def _is_blank(con: duckdb.DuckDBPyConnection) -> bool:
    """True when the database has no table, view, macro or sequence of its own: a DuckDB file a
    first ingest created but did not get to commit the schema to."""
    row = con.execute(
        "SELECT (SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database())"
        " + (SELECT count(*) FROM duckdb_views() WHERE NOT internal AND database_name = current_database())"
    ).fetchone()
    return row is not None and row[0] == 0


def _blank_store(con: duckdb.DuckDBPyConnection,
                 config: dict[str, str | bool | int | float | list[str]]) -> duckdb.DuckDBPyConnection:
    """A store without runs, for a reader of a blank store (a 0-byte file, or a DuckDB file whose
    first ingest was killed before the schema committed): an in-memory database with the current
    schema, opened with the reader's ``config``, taking over ``con``'s spill directory. ``con`` is
    closed (unless it is that in-memory database already)."""
    if con.execute("SELECT current_database()").fetchone() != ("memory",):
        fin = _SPILL_DIRS.pop(con, None)
        cleanup = fin.detach() if fin is not None else None
        con.close()
        con = duckdb.connect(":memory:", config=config)
        if cleanup is not None:
            _obj, func, args, _kwargs = cleanup
            _SPILL_DIRS[con] = weakref.finalize(con, func, *args)
    try:
        ensure_schema(con)
    except BaseException:
        close(con)
        raise
    return con


def _remove_stale_creations(path: Path) -> None:
    """Remove what a creator killed between linking its new store into place and removing the
    temporary name left behind (``.<name>.<pid>.<n>.new``, a second link to the store), once its
    process is gone."""
    import glob

    for name in glob.glob(os.path.join(glob.escape(str(path.parent)), f".{glob.escape(path.name)}.*.new")):
        try:
            pid = int(Path(name).name[len(path.name) + 2:].split(".")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            Path(name).unlink(missing_ok=True)
        except (ValueError, OSError):
            continue


def _create_store(path: Path, config: dict[str, str | bool | int | float | list[str]]) -> None:
    """Create a new store atomically: the schema is written to a temporary file next to ``path``,
    which is then hard-linked into place (or renamed where links are not supported), so a store
    never appears without its schema, whenever the first ingest is killed. A 0-byte file at
    ``path`` (left by an older tracekit) is replaced. Nothing happens when a store exists.
    A concurrent creator that wins the race keeps its store; this one's is discarded."""
    try:
        if path.exists() and path.stat().st_size > 0:
            _remove_stale_creations(path)
            return
        if path.is_symlink() or (path.exists() and not path.is_file()):
            return  # DuckDB says what is wrong with it
    except OSError:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.new")
    try:
        con = duckdb.connect(str(tmp), config=config)
        try:
            ensure_schema(con, path)
        finally:
            con.close()
        if path.exists():
            if path.stat().st_size == 0:
                os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process created the store meanwhile: use theirs
            except OSError:
                if not path.exists():
                    os.replace(tmp, path)
    except OSError as exc:
        raise StoreError(path, f"cannot create the store: {exc.strerror or exc}") from None
    except duckdb.Error as exc:
        raise StoreError(path, f"cannot create the store: {first_line(exc)}") from None
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            try:
                leftover.unlink(missing_ok=True)
            except OSError:
                pass


def _schema_version(con: duckdb.DuckDBPyConnection) -> int | None:
    # duckdb_tables(), not information_schema: 1 ms instead of 11 on a fresh connection
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'tracekit_schema' "
        "AND schema_name = 'main' AND database_name = current_database()"
    ).fetchone()
    if not row or row[0] == 0:
        return None
    got = con.execute("SELECT max(version) FROM tracekit_schema").fetchone()
    return int(got[0]) if got and got[0] is not None else None


def _check_version(path: Path, version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(
            path,
            f"store has schema version {version}, newer than this tracekit's "
            f"{SCHEMA_VERSION}; upgrade tracekit",
        )


def ensure_schema(con: duckdb.DuckDBPyConnection, path: str | Path = "<store>") -> int:
    """Create the schema in an empty store or migrate an older one; return the version now held."""
    version = _schema_version(con)
    if version is None:
        n_tables = con.execute(
            "SELECT (SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' "
            "AND database_name = current_database()) + (SELECT count(*) FROM duckdb_views() "
            "WHERE NOT internal AND schema_name = 'main' AND database_name = current_database())"
        ).fetchone()
        if n_tables and n_tables[0]:
            raise StoreError(path, "not a tracekit store (a DuckDB file with other tables)")
        con.execute("BEGIN")
        try:
            con.execute(_TABLES_V1)
            con.execute(_TABLES_V3)
            con.execute(_COLUMNS_V4)
            con.execute(_VIEWS)
            con.execute("INSERT INTO tracekit_schema VALUES (?, ?)", [SCHEMA_VERSION, utc_now()])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return SCHEMA_VERSION
    _check_version(Path(path), version)
    if version < SCHEMA_VERSION:
        migrate(con, version, SCHEMA_VERSION)
    return SCHEMA_VERSION


def migrate(
    con: duckdb.DuckDBPyConnection,
    from_version: int,
    to_version: int,
    steps: dict[int, Migration] | None = None,
) -> None:
    """Apply ``steps[v]`` for ``v`` in ``[from_version, to_version)`` in one transaction."""
    steps = MIGRATIONS if steps is None else steps
    con.execute("BEGIN")
    try:
        for v in range(from_version, to_version):
            if v not in steps:
                raise StoreError("<store>", f"no migration from schema {v} to {v + 1}")
            steps[v](con)
            con.execute("INSERT INTO tracekit_schema VALUES (?, ?)", [v + 1, utc_now()])
        con.execute(_VIEWS)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


@contextmanager
def open_store(
    path: str | Path | None = None, *, read_only: bool = False
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Context manager around :func:`connect` that prints a notice while waiting for a lock."""
    p = Path(path) if path is not None else default_store_path()

    def notice() -> None:
        print(lock_wait_notice(p), file=sys.stderr)

    con = connect(p, read_only=read_only, on_wait=notice)
    try:
        yield con
    finally:
        close(con)


#: A run id prefix must have at least this many characters to name a run.
MIN_RUN_PREFIX = 4


def match_run_id(known: Iterable[str], run_id: str, path: str | Path) -> str:
    """The stored run id that ``run_id`` names among ``known``: itself, or the one id it is a
    prefix of (at least :data:`MIN_RUN_PREFIX` characters). No match, or a prefix of several ids,
    is a :class:`TraceInputError` that says which runs match."""
    ids = sorted(k for k in known if k == run_id or (len(run_id) >= MIN_RUN_PREFIX and k.startswith(run_id)))
    if run_id in ids:
        return run_id
    if len(ids) == 1:
        return ids[0]
    if not ids:
        short = f" (a prefix needs at least {MIN_RUN_PREFIX} characters)" if len(run_id) < MIN_RUN_PREFIX else ""
        raise TraceInputError(Path(path), f"no run {run_id!r} in the store{short} (see `tracekit runs`)")
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    raise TraceInputError(Path(path), f"run id prefix {run_id!r} is ambiguous: it matches {', '.join(ids[:5])}{more}")


def resolve_run_id(con: duckdb.DuckDBPyConnection, run_id: str, path: str | Path) -> str:
    """:func:`match_run_id` against the runs of the store open on ``con``."""
    rows = con.execute("SELECT run_id FROM run_meta WHERE starts_with(run_id, ?)", [run_id]).fetchall()
    return match_run_id([r[0] for r in rows], run_id, path)


def update_run_meta(
    con: duckdb.DuckDBPyConnection, run_id: str, *, label: str | None = None, workload: str | None = None,
    tags: dict[str, str] | None = None,
) -> list[str]:
    """Set a run's label and workload and merge ``tags`` into its tags (a key given replaces its
    value), inside the caller's transaction; return the fields that changed (``label``,
    ``workload``, ``tags``)."""
    row = con.execute("SELECT label, workload, tags FROM run_meta WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        return []
    old_label, old_workload, old_tags = row
    merged = {**(dict(old_tags) if old_tags else {}), **(tags or {})}
    changed = [name for name, new, old in (("label", label, old_label), ("workload", workload, old_workload))
               if new is not None and new != old]
    if tags and merged != (dict(old_tags) if old_tags else {}):
        changed.append("tags")
    if changed:
        con.execute(
            "UPDATE run_meta SET label = ?, workload = ?, tags = MAP(?::VARCHAR[], ?::VARCHAR[]) WHERE run_id = ?",
            [label if label is not None else old_label, workload if workload is not None else old_workload,
             list(merged), list(merged.values()), run_id])
    return changed


def delete_runs(con: duckdb.DuckDBPyConnection, run_ids: Iterable[str]) -> int:
    """Remove runs from every base table in one transaction; return how many were removed."""
    ids = [r[0] for r in con.execute("SELECT run_id FROM run_meta WHERE run_id IN (SELECT unnest(?::VARCHAR[]))",
                                     [list(run_ids)]).fetchall()]
    if not ids:
        return 0
    con.execute("BEGIN")
    try:
        for table in _RUN_TABLES:
            con.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return len(ids)


def delete_run(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Remove one run from every base table; return how many runs were removed (0 or 1)."""
    return delete_runs(con, [run_id])
