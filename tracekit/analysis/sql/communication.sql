-- communication.sql: collectives (one row per collective kernel, with its message size, bus
-- bandwidth and the part of it no other device work overlaps), the host ops that issue them, and
-- the exposed communication time of each device. Bus bandwidth follows the NCCL-tests definition
-- (NVIDIA/nccl-tests doc/PERFORMANCE.md): algbw = S / t, busbw = algbw x 2(n-1)/n for all-reduce,
-- x (n-1)/n for all-gather, reduce-scatter and all-to-all, x 1 for broadcast, reduce and
-- send/recv, with S the NCCL-tests size (all-gather: the gathered total, reduce-scatter: the
-- total before scattering). It is compared with a per-direction interconnect peak.

-- Bytes per element of a dtype as traces spell it: Kineto collective args (`Float`, `BFloat16`,
-- `Long`, `Byte`) and op input types (`float`, `c10::BFloat16`, `long int`, `signed char`).
-- @arg dtype VARCHAR the dtype string
-- @returns INTEGER bytes per element, NULL when the dtype is unknown (e.g. `TensorList`)
CREATE OR REPLACE TEMP MACRO dtype_bytes(dtype) AS
  CASE
    WHEN dtype IS NULL THEN NULL
    WHEN regexp_matches(lower(dtype), 'float8|fp8|e4m3|e5m2|^(c10::)?(byte|char|signed char|unsigned char|bool|int8|uint8|qint8|quint8)$')
      THEN 1
    WHEN regexp_matches(lower(dtype), '^(c10::)?(bfloat16|half|float16|short|short int|int16|uint16)$') THEN 2
    WHEN regexp_matches(lower(dtype), '^(c10::)?(float|float32|int|int32|uint32|unsigned int)$') THEN 4
    WHEN regexp_matches(lower(dtype), '^(c10::)?(double|float64|long|long int|long long|int64|uint64|complexfloat)$')
      THEN 8
  END;

-- The collective a name stands for: a kernel (`ncclDevKernel_AllGather_RING_LL`,
-- `multimem_all_reduce_kernel`, vLLM `cross_device_reduce_1stage`), an XLA op (`all-reduce`,
-- `collective-permute`), a host op (`c10d::allreduce_`, `vllm::all_reduce`) or a Kineto
-- `Collective name` (`allreduce`, `_allgather_base`, `send`).
-- @arg name VARCHAR the name
-- @returns VARCHAR all_reduce | all_gather | reduce_scatter | all_to_all | broadcast | reduce | send_recv | barrier; NULL when the name does not say (RCCL `ncclDevKernel_Generic`)
CREATE OR REPLACE TEMP MACRO collective_kind(name) AS
  CASE
    WHEN name IS NULL THEN NULL
    WHEN regexp_matches(lower(name), 'reduce_?scatter|reduce-scatter') THEN 'reduce_scatter'
    WHEN regexp_matches(lower(name), 'all_?reduce|all-reduce|cross_device_reduce') THEN 'all_reduce'
    WHEN regexp_matches(lower(name), 'all_?gather|all-gather') THEN 'all_gather'
    WHEN regexp_matches(lower(name), 'all_?to_?all|all-to-all') THEN 'all_to_all'
    WHEN regexp_matches(lower(name), 'broadcast|bcast') THEN 'broadcast'
    WHEN regexp_matches(lower(name), 'send_?recv|collective-permute|(^|[^a-z])(send|recv)([^a-z]|$)|p2p')
      THEN 'send_recv'
    WHEN regexp_matches(lower(name), '(^|[^a-z])reduce([^a-z]|$)') THEN 'reduce'
    WHEN regexp_matches(lower(name), 'barrier') THEN 'barrier'
  END;

-- The union of each device's non-communication work (every device_work row whose class is not
-- communication: compute, copies and sets), as disjoint ordered islands with the busy time before
-- each: the busy time up to any instant t is busy_before_ns + min(t − start_ns, dur_ns) of the
-- last island starting at or before t (one ASOF join), so the overlap of any interval with
-- compute is a difference of two such lookups.
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column device INTEGER the device
-- @column start_ns BIGINT island start (ns)
-- @column end_ns BIGINT island end (ns)
-- @column dur_ns BIGINT end_ns − start_ns (ns)
-- @column busy_before_ns BIGINT Σ dur_ns of the earlier islands of the same (run, rank, device) (ns)
CREATE OR REPLACE TEMP VIEW compute_busy_intervals AS
WITH starts AS (  -- the rows that open an island: they start after every earlier row has ended
  SELECT run_id, rank, device, start_ns, max(end_ns) OVER w_before AS prev_max, max(end_ns) OVER w_all AS max_end
  FROM device_work WHERE kernel_class <> 'communication'
  WINDOW w_before AS (PARTITION BY run_id, rank, device ORDER BY start_ns, end_ns
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
         w_all AS (PARTITION BY run_id, rank, device ORDER BY start_ns, end_ns
                   ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
  QUALIFY prev_max IS NULL OR start_ns > prev_max),
islands AS (  -- an island ends where the next one's prev_max says; busy before = span − gaps so far
  SELECT run_id, rank, device, start_ns, coalesce(lead(prev_max) OVER w, max_end) AS end_ns,
         start_ns - first_value(start_ns) OVER w - coalesce(sum(start_ns - prev_max) OVER w, 0) AS busy_before_ns
  FROM starts
  WINDOW w AS (PARTITION BY run_id, rank, device ORDER BY start_ns ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
SELECT run_id, rank, device, start_ns, end_ns, end_ns - start_ns AS dur_ns, CAST(busy_before_ns AS BIGINT) AS busy_before_ns
FROM islands;

-- One row per collective kernel (device_work rows of class communication), with what the trace
-- says about its message and how much of it other device work hides. The message comes from the
-- kernel's own NCCL args (Kineto `In msg nelems`, `Out msg nelems`, `Group size`, `dtype`,
-- `Collective name`), else from the host op that launched it (the innermost op of the launch's
-- external id: `record_param_comms` / `nccl:*` carry the same args; for an all-reduce or
-- broadcast op such as `symm_mem::multimem_all_reduce_` or `vllm::all_reduce`, the element count
-- and dtype of its first input tensor). The group size falls back to the rank's world size.
-- Kernel time includes waiting for the slowest peer, so busbw_gbps is a lower bound of what the
-- link moved while data flowed. exposed_ns splits the device's exposed communication between its
-- collectives without counting any instant twice: Σ exposed_ns over a device = the union of its
-- collectives minus the union's overlap with the rest of its work.
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column device INTEGER the device
-- @column stream VARCHAR stream / queue / XPlane line
-- @column name VARCHAR the kernel name
-- @column start_ns BIGINT start (ns)
-- @column end_ns BIGINT end (ns)
-- @column dur_ns BIGINT duration (ns)
-- @column correlation_id BIGINT id of the launching runtime call (NULL when none)
-- @column op_name VARCHAR the host op that launched it (innermost op of the launch's external id), NULL when unknown
-- @column collective VARCHAR collective_kind of the kernel's collective name, its op's, its own name or its op name, first known; NULL when none says
-- @column dtype VARCHAR element dtype as the trace spells it, NULL when unknown
-- @column in_elems BIGINT input elements per rank, NULL when unknown
-- @column out_elems BIGINT output elements per rank, NULL when unknown
-- @column group_size INTEGER ranks in the collective (the kernel's or op's group size, else the rank's world size)
-- @column msg_bytes BIGINT NCCL-tests size S (B): in_elems x dtype bytes; all-gather: out_elems (else in_elems x n); reduce-scatter: in_elems (else out_elems x n); NULL when unknown
-- @column bus_factor DOUBLE busbw ÷ algbw: 2(n−1)/n all-reduce, (n−1)/n all-gather/reduce-scatter/all-to-all, 1 broadcast/reduce/send-recv
-- @column algbw_gbps DOUBLE msg_bytes ÷ dur_ns (GB/s = 10⁹ B/s)
-- @column busbw_gbps DOUBLE algbw_gbps x bus_factor (GB/s, compare with a per-direction interconnect peak)
-- @column overlap_ns BIGINT part of the kernel during which other (non-communication) work of the same (rank, device) runs (ns)
-- @column exposed_ns BIGINT part of the kernel during which the device runs nothing else, less what an earlier-starting collective of the device already covers (ns)
CREATE OR REPLACE TEMP VIEW collectives AS
WITH c AS (
  SELECT run_id, rank, device, stream, name, start_ns, end_ns, dur_ns, correlation_id,
         row_number() OVER w AS rid,
         max(end_ns) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM device_work WHERE kernel_class = 'communication'
  WINDOW w AS (PARTITION BY run_id, rank, device ORDER BY start_ns, end_ns, correlation_id)),
args AS (
  SELECT k.run_id, k.rank, k.correlation_id, k.start_ns, k.name,
         any_value(k.collective_name) AS collective_name, any_value(k.in_msg_nelems) AS in_msg_nelems,
         any_value(k.out_msg_nelems) AS out_msg_nelems, any_value(k.group_size) AS group_size,
         any_value(k.dtype) AS dtype
  FROM kernels k SEMI JOIN c ON c.run_id = k.run_id AND c.rank = k.rank AND c.name = k.name
   AND c.start_ns = k.start_ns
  WHERE k.collective_name IS NOT NULL OR k.in_msg_nelems IS NOT NULL OR k.dtype IS NOT NULL
  GROUP BY ALL),
calls AS (
  SELECT DISTINCT run_id, rank, correlation_id FROM c WHERE correlation_id IS NOT NULL),
ext AS MATERIALIZED (
  SELECT r.run_id, r.rank, r.correlation_id, r.external_id
  FROM runtime_calls_in_scope r SEMI JOIN calls x
    ON r.run_id = x.run_id AND r.rank = x.rank AND r.correlation_id = x.correlation_id
  WHERE r.external_id IS NOT NULL),
launch_ops AS (
  SELECT e.run_id, e.rank, e.correlation_id,
         arg_min({'name': o.name, 'collective_name': o.collective_name, 'in_msg_nelems': o.in_msg_nelems,
                  'out_msg_nelems': o.out_msg_nelems, 'group_size': o.group_size, 'dtype': o.dtype,
                  'input_dims': o.input_dims, 'input_types': o.input_types}, o.dur_ns) AS op
  FROM ext e JOIN ops o ON o.run_id = e.run_id AND o.rank = e.rank AND o.external_id = e.external_id
  GROUP BY ALL),
j AS (
  SELECT c.*, lo.op, a.in_msg_nelems AS k_in, a.out_msg_nelems AS k_out, a.group_size AS k_group,
         a.dtype AS k_dtype, rk.world_size,
         coalesce(collective_kind(a.collective_name), collective_kind(lo.op.collective_name),
                  collective_kind(c.name), collective_kind(lo.op.name)) AS collective,
         CASE WHEN json_valid(lo.op.input_dims) THEN coalesce(
                CAST(list_product(TRY_CAST(json_extract(lo.op.input_dims, '$[0]') AS BIGINT[])) AS BIGINT),
                CASE WHEN json_array_length(json_extract(lo.op.input_dims, '$[0]')) = 1 THEN
                  CAST(list_product(TRY_CAST(json_extract(lo.op.input_dims, '$[0][0]') AS BIGINT[])) AS BIGINT)
                END) END AS op_first_elems,
         CASE WHEN json_valid(lo.op.input_types) THEN json_extract_string(lo.op.input_types, '$[0]') END AS op_first_type
  FROM c
  LEFT JOIN args a ON a.run_id = c.run_id AND a.rank = c.rank AND a.name = c.name AND a.start_ns = c.start_ns
   AND a.correlation_id IS NOT DISTINCT FROM c.correlation_id
  LEFT JOIN launch_ops lo ON lo.run_id = c.run_id AND lo.rank = c.rank AND lo.correlation_id = c.correlation_id
  LEFT JOIN ranks rk ON rk.run_id = c.run_id AND rk.rank = c.rank),
sized AS (
  SELECT *,
         coalesce(k_in, op.in_msg_nelems,
                  CASE WHEN collective IN ('all_reduce', 'broadcast', 'reduce') THEN op_first_elems END) AS in_elems,
         coalesce(k_out, op.out_msg_nelems,
                  CASE WHEN collective IN ('all_reduce', 'broadcast', 'reduce') THEN op_first_elems END) AS out_elems,
         coalesce(k_dtype, op.dtype,
                  CASE WHEN collective IN ('all_reduce', 'broadcast', 'reduce') THEN op_first_type END) AS el_dtype,
         CAST(coalesce(k_group, op.group_size, world_size) AS INTEGER) AS n
  FROM j),
msg AS (
  SELECT *,
         CAST(CASE collective
                WHEN 'all_gather' THEN coalesce(out_elems, in_elems * n)
                WHEN 'reduce_scatter' THEN coalesce(in_elems, out_elems * n)
                ELSE coalesce(in_elems, out_elems) END * dtype_bytes(el_dtype) AS BIGINT) AS msg_bytes,
         CASE WHEN n IS NULL OR n < 1 THEN NULL
              WHEN collective = 'all_reduce' THEN 2.0 * (n - 1) / n
              WHEN collective IN ('all_gather', 'reduce_scatter', 'all_to_all') THEN (n - 1) / n
              WHEN collective IN ('broadcast', 'reduce', 'send_recv') THEN 1.0 END AS bus_factor
  FROM sized),
pts AS (  -- 0: start, 1: start of the part no earlier collective covers, 2: end
  SELECT run_id, rank, device, rid, 0 AS k, start_ns AS t FROM c
  UNION ALL
  SELECT run_id, rank, device, rid, 1 AS k, least(greatest(start_ns, coalesce(prev_end, start_ns)), end_ns) FROM c
  UNION ALL
  SELECT run_id, rank, device, rid, 2 AS k, end_ns FROM c),
busy_at AS (
  SELECT p.run_id, p.rank, p.device, p.rid, p.k, p.t,
         coalesce(b.busy_before_ns + least(p.t - b.start_ns, b.dur_ns), 0) AS busy
  FROM pts p ASOF LEFT JOIN compute_busy_intervals b
    ON b.run_id = p.run_id AND b.rank = p.rank AND b.device IS NOT DISTINCT FROM p.device AND b.start_ns <= p.t),
ov AS (
  SELECT run_id, rank, device, rid,
         CAST(max(busy) FILTER (WHERE k = 2) - max(busy) FILTER (WHERE k = 0) AS BIGINT) AS overlap_ns,
         CAST((max(t) FILTER (WHERE k = 2) - max(t) FILTER (WHERE k = 1))
              - (max(busy) FILTER (WHERE k = 2) - max(busy) FILTER (WHERE k = 1)) AS BIGINT) AS exposed_ns
  FROM busy_at GROUP BY ALL)
SELECT m.run_id, m.rank, m.device, m.stream, m.name, m.start_ns, m.end_ns, m.dur_ns, m.correlation_id,
       m.op.name AS op_name, m.collective, m.el_dtype AS dtype, m.in_elems, m.out_elems, m.n AS group_size,
       m.msg_bytes, m.bus_factor, m.msg_bytes / nullif(m.dur_ns, 0) AS algbw_gbps,
       m.msg_bytes / nullif(m.dur_ns, 0) * m.bus_factor AS busbw_gbps,
       coalesce(ov.overlap_ns, 0) AS overlap_ns, coalesce(ov.exposed_ns, m.dur_ns) AS exposed_ns
FROM msg m
LEFT JOIN ov ON ov.run_id = m.run_id AND ov.rank = m.rank AND ov.device IS NOT DISTINCT FROM m.device AND ov.rid = m.rid;

-- Host ops that issue a collective (c10d, `_c10d_functional`, `record_param_comms`, `nccl:*`,
-- `symm_mem::…`, vLLM / SGLang collective ops; waits left out), with whether each is the
-- outermost collective op of its thread: the host cost of one collective call is the duration
-- of an outermost one (vLLM `vllm::all_reduce` wraps `symm_mem::multimem_all_reduce_`; `c10d::`
-- ops wrap `record_param_comms`).
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column pid VARCHAR process
-- @column tid VARCHAR thread
-- @column name VARCHAR the op name
-- @column start_ns BIGINT start (ns)
-- @column end_ns BIGINT end (ns)
-- @column dur_ns BIGINT duration on the host (ns)
-- @column collective VARCHAR collective_kind of the op's `Collective name`, else of its name
-- @column outermost BOOLEAN no other collective op of the same thread contains it
CREATE OR REPLACE TEMP VIEW collective_ops AS
WITH o AS (
  SELECT run_id, rank, pid, tid, name, start_ns, end_ns, dur_ns,
         collective_kind(coalesce(nullif(collective_name, ''), name)) AS collective, collective_name
  FROM ops
  WHERE regexp_matches(name, '^(c10d::|c10d_functional::|_c10d_functional::|nccl:|record_param_comms$)|^(vllm|sglang|symm_mem|_?custom_ar|trtllm)::.*(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast)')
    AND NOT regexp_matches(lower(name), 'wait')
    AND coalesce(lower(collective_name), '') NOT LIKE '%wait%')
SELECT run_id, rank, pid, tid, name, start_ns, end_ns, dur_ns, collective,
       coalesce(max(end_ns) OVER (PARTITION BY run_id, rank, pid, tid ORDER BY start_ns, end_ns DESC
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) < end_ns, true) AS outermost
FROM o;

-- Communication of each device of each run (one row per run_window row): collective time, and
-- the exposed part inside the run window: the union of the device's collective kernels minus its
-- overlap with the union of the device's other work (Σ collectives.exposed_ns over the kernels
-- that start in the window; a session boundary never cuts a kernel, so none straddles it).
-- Collectives that overlap each other count once. exposed_ns is what perfect overlap with compute
-- (or removing the collectives) could save at most on that device.
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column device INTEGER the device
-- @column window_ns BIGINT the device's run window (ns)
-- @column n_collectives BIGINT collective kernels of the device in the window
-- @column collective_ns BIGINT Σ dur_ns of those kernels (ns; concurrent ones both count)
-- @column exposed_ns BIGINT part of the window during which the device runs collectives and nothing else (ns)
-- @column exposed_fraction DOUBLE exposed_ns ÷ window_ns (0..1)
CREATE OR REPLACE TEMP VIEW communication_by_device AS
SELECT w.run_id, w.rank, w.device, w.window_ns, count(c.start_ns) AS n_collectives,
       CAST(coalesce(sum(c.dur_ns), 0) AS BIGINT) AS collective_ns,
       CAST(coalesce(sum(c.exposed_ns), 0) AS BIGINT) AS exposed_ns,
       coalesce(sum(c.exposed_ns), 0) / nullif(w.window_ns, 0) AS exposed_fraction
FROM run_window w
LEFT JOIN collectives c
  ON c.run_id = w.run_id AND c.rank = w.rank AND c.device IS NOT DISTINCT FROM w.device
 AND c.start_ns >= w.window_start_ns AND c.start_ns <= w.window_end_ns
GROUP BY w.run_id, w.rank, w.device, w.window_ns;
