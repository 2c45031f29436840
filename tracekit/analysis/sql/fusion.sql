-- fusion.sql: chains of unfused elementwise / norm / reduction kernels on a stream.

-- Whether a device row can be part of an unfused elementwise chain (chain_kernels, and the
-- fusion analyzer's fast path): a row of category `kernel` and class elementwise, norm or
-- reduction that is not a pass of a library algorithm (cuBLAS split-K reduce, CUB / rocPRIM sort
-- and scan passes) nor a ggml `mul_mat*` GEMM, in a run that is not an XPlane capture.
-- @arg name VARCHAR the kernel name
-- @arg category VARCHAR its kernels.category
-- @arg kclass VARCHAR its kernel_class
-- @arg run_format VARCHAR runs.format of its run
-- @returns BOOLEAN true when fusing it with its neighbours is the analyzer's question
CREATE OR REPLACE TEMP MACRO fusable_kernel(name, category, kclass, run_format) AS
  category = 'kernel' AND kclass IN ('elementwise', 'norm', 'reduction')
  AND run_format IS DISTINCT FROM 'xplane'
  AND NOT regexp_matches(lower(name), 'splitkreduce|radixsort|onesweep|cub::|rocprim::|mul_mat');

-- The fusable kernels of every run in stream order, each with the chain of unfused kernels it
-- belongs to. A kernel is fusable when it is a device row of category `kernel` and class
-- elementwise, norm or reduction, is not a pass of a library algorithm (cuBLAS split-K reduce,
-- CUB / rocPRIM sort and scan passes) nor a ggml `mul_mat*` GEMM (which the name rules call
-- elementwise), and its run is not an XPlane capture (XLA has already run its fusion pass
-- there). Communication, memcpy / memset, attention (flash attention included), GEMM, MoE and
-- `other` rows are never fusable. A chain is a maximal run of consecutive fusable kernels of one
-- stream: any other device row of the stream (the rows of device_work: `kernels` less XPlane
-- `xla_async`) between two of them, or a gap longer than max_gap_ns, ends it. Covers every row
-- of the run (no run-window trim: capture sessions are separated by far longer gaps than
-- max_gap_ns). Written for 1M-row runs: classes and exclusions are decided once per distinct
-- kernel name, and one sort per stream (of the 64-bit name hash, not the name) gives both the
-- gap to the previous row and the running count of non-fusable rows; the rare gap breaks split
-- those segments afterwards (a hash join, no second sort).
-- @arg max_gap_ns BIGINT a gap longer than this before a kernel (ns) starts a new chain
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column device INTEGER the device
-- @column stream VARCHAR the stream / queue
-- @column name VARCHAR the kernel name
-- @column name_hash UBIGINT hash(name): a cheap key for grouping by kernel name
-- @column kernel_class VARCHAR its class: elementwise, norm or reduction
-- @column start_ns BIGINT start (ns)
-- @column dur_ns BIGINT duration (ns, negative durations clamped to 0)
-- @column end_ns BIGINT start_ns + dur_ns (ns)
-- @column correlation_id BIGINT id of the launching runtime call (NULL when none)
-- @column gap_before_ns BIGINT start_ns − end of the previous device row of the stream (ns; NULL for the first)
-- @column chain_start BOOLEAN the kernel starts a chain (the row before it is not fusable, is more than max_gap_ns away, or there is none)
-- @column chain BIGINT the chain within (run_id, rank, device, stream), increasing in time: non-fusable rows of the stream before the kernel × 2²⁰ + gap breaks since the last of them
CREATE OR REPLACE TEMP MACRO chain_kernels(max_gap_ns) AS TABLE
WITH names AS (  -- the class regexes once per distinct name (device_work carries the class)
  SELECT d.run_id, d.name, any_value(d.kernel_class) AS kernel_class,
         fusable_kernel(d.name, 'kernel', any_value(d.kernel_class), any_value(x.format)) AS fusable
  FROM (SELECT DISTINCT run_id, name, kernel_class FROM device_work WHERE category = 'kernel') d
  LEFT JOIN runs x ON x.run_id = d.run_id
  GROUP BY d.run_id, d.name),
w AS (
  SELECT k.run_id, k.rank, k.device, k.stream, k.name, hash(k.name) AS name_hash, k.start_ns, k.dur_ns, k.end_ns,
         k.correlation_id, k.category = 'kernel' AND coalesce(n.fusable, false) AS fusable, n.kernel_class
  FROM device_work k LEFT JOIN names n ON n.run_id = k.run_id AND n.name = k.name),
g AS (
  SELECT *, start_ns - lag(end_ns) OVER s AS gap_before_ns, lag(fusable) OVER s AS prev_fusable,
         sum(CASE WHEN fusable THEN 0 ELSE 1 END) OVER (s ROWS UNBOUNDED PRECEDING) AS seg
  FROM w
  WINDOW s AS (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, end_ns, correlation_id NULLS LAST)),
c AS (
  SELECT * EXCLUDE (fusable, prev_fusable),
         prev_fusable IS NOT true OR gap_before_ns > max_gap_ns AS chain_start,
         prev_fusable IS true AND gap_before_ns > max_gap_ns AS gap_break
  FROM g WHERE fusable),
gb AS (
  SELECT run_id, rank, device, stream, seg, list(start_ns) AS breaks FROM c WHERE gap_break
  GROUP BY run_id, rank, device, stream, seg)
SELECT c.run_id, c.rank, c.device, c.stream, c.name, c.name_hash, c.kernel_class, c.start_ns, c.dur_ns,
       c.end_ns, c.correlation_id, c.gap_before_ns, c.chain_start,
       CAST(c.seg * 1048576 + coalesce(len(list_filter(gb.breaks, lambda b: b <= c.start_ns)), 0) AS BIGINT)
         AS chain
FROM c
LEFT JOIN gb ON gb.run_id = c.run_id AND gb.rank = c.rank AND gb.device IS NOT DISTINCT FROM c.device
 AND gb.stream IS NOT DISTINCT FROM c.stream AND gb.seg = c.seg;

-- Chains of at least two unfused elementwise / norm / reduction kernels (chain_kernels), one row
-- each: what a fused kernel would replace. Time is the members' summed device time; the gaps
-- between them are not included.
-- @arg max_gap_ns BIGINT a gap longer than this before a kernel (ns) starts a new chain
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column device INTEGER the device
-- @column stream VARCHAR the stream / queue
-- @column chain BIGINT the chain id within (run_id, rank, device, stream)
-- @column n_kernels BIGINT kernels in the chain (≥ 2)
-- @column start_ns BIGINT start of the first kernel (ns)
-- @column end_ns BIGINT end of the last kernel (ns)
-- @column time_ns BIGINT Σ dur_ns of the kernels (ns)
-- @column longest_ns BIGINT the longest kernel's dur_ns (ns)
-- @column names VARCHAR[] kernel names in stream order
-- @column classes VARCHAR[] their kernel classes, in the same order
-- @column correlation_ids BIGINT[] their launching-call ids, in the same order (NULL entries when none)
CREATE OR REPLACE TEMP MACRO kernel_chains(max_gap_ns) AS TABLE
SELECT run_id, rank, device, stream, chain, count(*) AS n_kernels, min(start_ns) AS start_ns,
       max(end_ns) AS end_ns, CAST(sum(dur_ns) AS BIGINT) AS time_ns, max(dur_ns) AS longest_ns,
       list(name ORDER BY start_ns, end_ns) AS names, list(kernel_class ORDER BY start_ns, end_ns) AS classes,
       list(correlation_id ORDER BY start_ns, end_ns) AS correlation_ids
FROM chain_kernels(max_gap_ns)
GROUP BY run_id, rank, device, stream, chain
HAVING count(*) >= 2;
