-- steps.sql: the one step-marker parser, steps with the GPU span of their own work, and phases.

-- Host annotations that mark a step, with what they say about it. Families (best first):
-- `vllm` execute_{n}_context_{c}(…)_generation_{g}(…) (TraceLens' vLLM/SGLang hook, the outermost
-- span of a scheduler step, sampling included; also execute_context_{c}(…)_generation_{g}(…));
-- `sglang` step[DECODE bs=N] / step[EXTEND bs=N toks=T] / PREFILL / MIXED / IDLE (closes before
-- the sampling kernels are launched); `trtllm` (TensorRT-LLM's NVTX step ranges, on by default:
-- PyExecutor's `[Executor] _forward_step N: C ctx reqs[, T ctx tokens], G gen reqs` and the C++
-- executor's `executeStep: C ctx reqs, G gen reqs`: context requests prefill, generation requests
-- decode); `phase` annotations named exactly decode_step / prefill_step / decode / prefill;
-- `execute_model` (a model step whose phase the marker does not say: vLLM's model-runner span
-- `execute_model` or NVTX scope `gpu_model_runner: forward`, SGLang's NVTX `scheduler.run_batch`);
-- `profiler_step` (ProfilerStep#N); `device_step` (XPlane step lines on the device). Graph-capture
-- annotations (capture_32_DECODE) and names that merely contain "decode" are not steps.
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column family VARCHAR sglang | vllm | trtllm | phase | execute_model | profiler_step | device_step
-- @column family_rank INTEGER 1 (best) .. 7: the run's steps come from its best family
-- @column name VARCHAR the annotation's name
-- @column start_ns BIGINT annotation start (ns; host clock, device clock for device_step)
-- @column end_ns BIGINT annotation end (ns)
-- @column on_device BOOLEAN the marker is on the device timeline (device_step)
-- @column phase VARCHAR decode | prefill | mixed | idle | NULL (the marker does not say)
-- @column batch_size BIGINT requests in the step when the marker says (SGLang bs=, vLLM c+g, TensorRT-LLM ctx+gen reqs)
-- @column new_tokens BIGINT tokens processed in the step when the marker says (decode: one per request)
-- @column context_tokens BIGINT Σ context length the decode requests attend over (vLLM sk of the generation part)
-- @column decode_seqs BIGINT requests decoding one token in the step (vLLM g; SGLang DECODE bs)
-- @column prefill_seqs BIGINT requests prefilling in the step (vLLM c; SGLang EXTEND/PREFILL bs)
-- @column prefill_tokens BIGINT new tokens of the prefilling requests (vLLM sq of the context part; SGLang toks)
-- @column prefill_context_tokens BIGINT Σ keys the prefilling requests attend over, their new tokens included (vLLM sk of the context part)
-- @column prefill_attention_pairs BIGINT causal query-key pairs of the prefilling requests: Σ (sq·sk − sq²/2 + sq/2) from vLLM's sqsk and sqsq sums
CREATE OR REPLACE TEMP VIEW step_markers AS
WITH a AS (
  SELECT run_id, rank, name, start_ns, end_ns, on_device, is_profiler_step,
         regexp_extract(name, '^step\[(DECODE|EXTEND|PREFILL|MIXED|IDLE)\b([^\]]*)\]', ['kind', 'rest'], 'i') AS sg,
         regexp_extract(name, '^execute_(?:([0-9]+)_)?context_([0-9]+)\(([^)]*)\)_generation_([0-9]+)\(([^)]*)\)',
                        ['n', 'c', 'cargs', 'g', 'gargs']) AS vl,
         -- TensorRT-LLM's PyExecutor ([Executor] _forward_step N: C ctx reqs[, T ctx tokens], G gen reqs)
         -- and its C++ executor (executeStep: C ctx reqs, G gen reqs)
         regexp_extract(name, '^(?:\[Executor\] _forward_step(?: [0-9]+)?|executeStep): ([0-9]+) ctx reqs, (?:([0-9]+) ctx tokens, )?([0-9]+) gen reqs',
                        ['c', 'ctok', 'g']) AS tr
  FROM annotations WHERE in_scope(run_id)),
f AS (
  SELECT *,
    CASE WHEN sg.kind <> '' AND NOT on_device THEN 'sglang'
         WHEN vl.c <> '' AND NOT on_device THEN 'vllm'
         WHEN tr.c <> '' AND NOT on_device THEN 'trtllm'
         WHEN regexp_matches(lower(name), '^(decode|prefill)(_step)?(_[0-9]+|_len[0-9]+_t[0-9]+)?$')
              AND NOT on_device THEN 'phase'
         -- a model step without phase: vLLM's model runner span (its NVTX scope with
         -- VLLM_NVTX_SCOPES_FOR_PROFILING=1) and SGLang's scheduler NVTX range (SGLANG_ENABLE_NVTX_SCHEDULER)
         WHEN name IN ('execute_model', 'gpu_model_runner: forward', 'scheduler.run_batch') AND NOT on_device
              THEN 'execute_model'
         WHEN is_profiler_step AND NOT on_device THEN 'profiler_step'
         WHEN is_profiler_step AND on_device AND NOT regexp_matches(name, '^ProfilerStep#') THEN 'device_step'
    END AS family
  FROM a)
SELECT run_id, rank, family,
       CASE family WHEN 'vllm' THEN 1 WHEN 'sglang' THEN 2 WHEN 'trtllm' THEN 3 WHEN 'phase' THEN 4
                   WHEN 'execute_model' THEN 5 WHEN 'profiler_step' THEN 6 ELSE 7 END AS family_rank,
       name, start_ns, end_ns, on_device,
       CASE family
         WHEN 'sglang' THEN CASE upper(sg.kind) WHEN 'DECODE' THEN 'decode' WHEN 'MIXED' THEN 'mixed'
                                                WHEN 'IDLE' THEN 'idle' ELSE 'prefill' END
         WHEN 'vllm' THEN CASE WHEN TRY_CAST(vl.c AS BIGINT) = 0 AND TRY_CAST(vl.g AS BIGINT) > 0 THEN 'decode'
                               WHEN TRY_CAST(vl.c AS BIGINT) > 0 AND TRY_CAST(vl.g AS BIGINT) = 0 THEN 'prefill'
                               WHEN TRY_CAST(vl.c AS BIGINT) > 0 AND TRY_CAST(vl.g AS BIGINT) > 0 THEN 'mixed' END
         WHEN 'trtllm' THEN CASE WHEN TRY_CAST(tr.c AS BIGINT) = 0 AND TRY_CAST(tr.g AS BIGINT) > 0 THEN 'decode'
                                 WHEN TRY_CAST(tr.c AS BIGINT) > 0 AND TRY_CAST(tr.g AS BIGINT) = 0 THEN 'prefill'
                                 WHEN TRY_CAST(tr.c AS BIGINT) > 0 AND TRY_CAST(tr.g AS BIGINT) > 0 THEN 'mixed'
                                 ELSE 'idle' END
         WHEN 'phase' THEN CASE WHEN lower(name) LIKE 'decode%' THEN 'decode' ELSE 'prefill' END
       END AS phase,
       CASE family
         WHEN 'sglang' THEN TRY_CAST(regexp_extract(sg.rest, '\bbs=([0-9]+)', 1) AS BIGINT)
         WHEN 'vllm' THEN TRY_CAST(vl.c AS BIGINT) + TRY_CAST(vl.g AS BIGINT)
         WHEN 'trtllm' THEN TRY_CAST(tr.c AS BIGINT) + TRY_CAST(tr.g AS BIGINT)
       END AS batch_size,
       CASE family
         WHEN 'sglang' THEN coalesce(TRY_CAST(regexp_extract(sg.rest, '\btoks=([0-9]+)', 1) AS BIGINT),
                                     CASE WHEN upper(sg.kind) = 'DECODE'
                                          THEN TRY_CAST(regexp_extract(sg.rest, '\bbs=([0-9]+)', 1) AS BIGINT) END)
         WHEN 'vllm' THEN coalesce(TRY_CAST(nullif(vl.n, '') AS BIGINT),
                                   TRY_CAST(regexp_extract(vl.cargs, '^([0-9]+)_', 1) AS BIGINT) + TRY_CAST(vl.g AS BIGINT))
         -- the context tokens (when the marker states them) and one token per generation request
         WHEN 'trtllm' THEN CASE WHEN TRY_CAST(tr.c AS BIGINT) = 0 THEN TRY_CAST(tr.g AS BIGINT)
                                 ELSE TRY_CAST(nullif(tr.ctok, '') AS BIGINT) + TRY_CAST(tr.g AS BIGINT) END
       END AS new_tokens,
       CASE family WHEN 'vllm' THEN TRY_CAST(regexp_extract(vl.gargs, '^sq[0-9]+sk([0-9]+)', 1) AS BIGINT) END
         AS context_tokens,
       CASE family WHEN 'vllm' THEN TRY_CAST(vl.g AS BIGINT)
                   WHEN 'trtllm' THEN TRY_CAST(tr.g AS BIGINT)
                   WHEN 'sglang' THEN CASE WHEN upper(sg.kind) = 'DECODE'
                                           THEN TRY_CAST(regexp_extract(sg.rest, '\bbs=([0-9]+)', 1) AS BIGINT) END
       END AS decode_seqs,
       CASE family WHEN 'vllm' THEN TRY_CAST(vl.c AS BIGINT)
                   WHEN 'trtllm' THEN TRY_CAST(tr.c AS BIGINT)
                   WHEN 'sglang' THEN CASE WHEN upper(sg.kind) IN ('EXTEND', 'PREFILL')
                                           THEN TRY_CAST(regexp_extract(sg.rest, '\bbs=([0-9]+)', 1) AS BIGINT) END
       END AS prefill_seqs,
       CASE family WHEN 'vllm' THEN TRY_CAST(regexp_extract(vl.cargs, '^(?:sq)?([0-9]+)', 1) AS BIGINT)
                   WHEN 'trtllm' THEN TRY_CAST(nullif(tr.ctok, '') AS BIGINT)
                   WHEN 'sglang' THEN CASE WHEN upper(sg.kind) IN ('EXTEND', 'PREFILL')
                                           THEN TRY_CAST(regexp_extract(sg.rest, '\btoks=([0-9]+)', 1) AS BIGINT) END
       END AS prefill_tokens,
       CASE family WHEN 'vllm' THEN TRY_CAST(regexp_extract(vl.cargs, '^sq[0-9]+sk([0-9]+)', 1) AS BIGINT) END
         AS prefill_context_tokens,
       CASE family WHEN 'vllm' THEN
         CAST(round(TRY_CAST(regexp_extract(vl.cargs, 'sqsk([0-9]+)', 1) AS DOUBLE)
                    - TRY_CAST(regexp_extract(vl.cargs, 'sqsq([0-9]+)', 1) AS DOUBLE) / 2
                    + TRY_CAST(regexp_extract(vl.cargs, '^sq([0-9]+)', 1) AS DOUBLE) / 2) AS BIGINT) END
         AS prefill_attention_pairs
FROM f WHERE family IS NOT NULL;

-- Steps: the markers of each rank's best family, numbered by start, with the device work that
-- belongs to them. A device row belongs to the step whose marker holds the start of the row's
-- launching call (graph replays included: every kernel of a replay belongs to the step that
-- launched it); a row without a launching call (XLA ops, RPD/rocprof rows without API
-- correlation) by its own start. The step time is the GPU span of the step's own work
-- (device_end_ns − device_start_ns), not the host marker: host markers close before the GPU has
-- run what they launched, and a host block inside a step (a blocking copy) shows as the gap
-- between the marker's start and device_start_ns. Idle gaps inside the span that a host block
-- explains (idle_gaps of kind sync, runtime_call, data_loading, compile, graph_capture) are counted in
-- blocked_ns and left out of step_time_ns: they are reported as idle with their cause, and a
-- step time that included a 463 ms blocking copy would describe the copy, not the step.
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column step BIGINT 1, 2, ... by marker start per rank
-- @column family VARCHAR the marker family (step_markers.family)
-- @column name VARCHAR the marker's name
-- @column phase VARCHAR decode | prefill | mixed | idle | NULL (unknown). From the marker; for execute_model markers (which do not say) from the attention kernels the step launches: decode attention (paged_attention, flash-decoding, MLA decode) ⇒ decode, prefill attention (fmha, flash_fwd, varlen, context_attention) ⇒ prefill, both ⇒ mixed
-- @column batch_size BIGINT requests in the step when the marker says
-- @column new_tokens BIGINT tokens processed when the marker says
-- @column context_tokens BIGINT Σ context the decode requests attend over, when the marker says
-- @column decode_seqs BIGINT requests decoding one token, when the marker says
-- @column prefill_seqs BIGINT requests prefilling, when the marker says
-- @column prefill_tokens BIGINT new tokens of the prefilling requests, when the marker says
-- @column prefill_context_tokens BIGINT Σ keys the prefilling requests attend over (their new tokens included), when the marker says
-- @column prefill_attention_pairs BIGINT causal query-key pairs of the prefilling requests, when the marker says
-- @column host_start_ns BIGINT marker start (ns)
-- @column host_end_ns BIGINT marker end (ns)
-- @column device_start_ns BIGINT first start of the step's device rows (ns; NULL when none)
-- @column device_end_ns BIGINT last end of the step's device rows (ns)
-- @column device_span_ns BIGINT device_end_ns − device_start_ns (ns)
-- @column blocked_ns BIGINT idle inside the span explained by a host block (sync, long runtime call, DataLoader, compile, graph capture) (ns)
-- @column step_time_ns BIGINT device_span_ns − blocked_ns: the step time (ns)
-- @column n_kernels BIGINT device rows of category kernel in the step
-- @column n_rows BIGINT device rows of every category in the step
-- @column kernel_time_ns BIGINT Σ dur_ns of the step's device rows (ns)
-- @column host_lead_ns BIGINT device_start_ns − host_start_ns: how long after the marker opened the GPU began the step's work (ns)
CREATE OR REPLACE TEMP VIEW steps AS
WITH best AS (
  SELECT *, min(family_rank) OVER (PARTITION BY run_id, rank) AS best_rank FROM step_markers),
st AS (
  SELECT run_id, rank, row_number() OVER (PARTITION BY run_id, rank ORDER BY start_ns, end_ns) AS step,
         family, name, phase, batch_size, new_tokens, context_tokens, decode_seqs, prefill_seqs, prefill_tokens,
         prefill_context_tokens, prefill_attention_pairs, start_ns AS host_start_ns,
         end_ns AS host_end_ns
  FROM best WHERE family_rank = best_rank),
calls AS (
  SELECT run_id, rank, correlation_id, min(start_ns) AS api_ns
  FROM runtime_calls_in_scope WHERE correlation_id IS NOT NULL AND in_scope(run_id) GROUP BY ALL),
placed AS (  -- place each launching call once (many kernels share one graph launch)
  SELECT c.run_id, c.rank, c.correlation_id, CASE WHEN c.api_ns < s.host_end_ns THEN s.step END AS step
  FROM calls c ASOF LEFT JOIN st s ON s.run_id = c.run_id AND s.rank = c.rank AND c.api_ns >= s.host_start_ns
  WHERE c.run_id IN (SELECT run_id FROM st)),
attn AS (  -- execute_model markers say no phase: the attention kernels a step launches do
  SELECT p.run_id, p.rank, p.step,
         bool_or(regexp_matches(lower(w.name), 'paged_?attention|decode_?attention|flash_?decoding|mla_decode|decode_attn'))
           AS dec,
         bool_or(regexp_matches(lower(w.name), 'fmha|flash_fwd|flash_attn|context_attention|prefill|attn_fwd|varlen')
                 AND NOT regexp_matches(lower(w.name), 'paged_?attention|decode')) AS pre
  FROM (SELECT * FROM device_work WHERE kernel_class = 'attention'
          AND run_id IN (SELECT run_id FROM st WHERE family = 'execute_model')) w
  JOIN placed p ON p.run_id = w.run_id AND p.rank = w.rank AND p.correlation_id = w.correlation_id
  WHERE p.step IS NOT NULL GROUP BY ALL),
by_call AS (  -- device rows summed per launching correlation id first (a graph launch has many)
  SELECT run_id, rank, correlation_id, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
         count(*) FILTER (WHERE category = 'kernel') AS n_kernels, count(*) AS n_rows,
         sum(dur_ns) AS dur_ns
  FROM device_work WHERE correlation_id IS NOT NULL AND run_id IN (SELECT run_id FROM st)
  GROUP BY run_id, rank, correlation_id),
called AS (
  SELECT p.step, b.* FROM by_call b
  JOIN placed p ON p.run_id = b.run_id AND p.rank = b.rank AND p.correlation_id = b.correlation_id),
own AS (  -- rows without a launching call: by their own start
  SELECT s.run_id, s.rank, s.step, w.start_ns, w.end_ns, CAST(w.category = 'kernel' AS BIGINT) AS n_kernels,
         1 AS n_rows, w.dur_ns
  FROM (SELECT * FROM device_work WHERE correlation_id IS NULL AND run_id IN (SELECT run_id FROM st)
        UNION ALL
        SELECT w.* FROM device_work w SEMI JOIN (  -- ids no call has
          SELECT b.run_id, b.rank, b.correlation_id FROM by_call b ANTI JOIN placed p
            ON p.run_id = b.run_id AND p.rank = b.rank AND p.correlation_id = b.correlation_id) o
          ON o.run_id = w.run_id AND o.rank = w.rank AND o.correlation_id = w.correlation_id) w
  ASOF JOIN st s ON s.run_id = w.run_id AND s.rank = w.rank AND w.start_ns >= s.host_start_ns
  WHERE w.start_ns < s.host_end_ns),
member AS (
  SELECT run_id, rank, step, start_ns, end_ns, n_kernels, n_rows, dur_ns FROM called WHERE step IS NOT NULL
  UNION ALL SELECT * FROM own),
agg AS (
  SELECT run_id, rank, step, min(start_ns) AS device_start_ns, max(end_ns) AS device_end_ns,
         CAST(sum(n_kernels) AS BIGINT) AS n_kernels, CAST(sum(n_rows) AS BIGINT) AS n_rows,
         CAST(sum(dur_ns) AS BIGINT) AS kernel_time_ns
  FROM member GROUP BY ALL),
blocked AS (
  SELECT a.run_id, a.rank, a.step,
         CAST(sum(least(g.end_ns, a.device_end_ns) - greatest(g.start_ns, a.device_start_ns)) AS BIGINT) AS blocked_ns
  FROM agg a JOIN idle_gaps g
    ON g.run_id = a.run_id AND g.rank = a.rank AND g.start_ns < a.device_end_ns AND g.end_ns > a.device_start_ns
   AND g.cause_kind IN ('sync', 'startup', 'runtime_call', 'data_loading', 'compile', 'graph_capture')
  GROUP BY ALL)
SELECT s.run_id, s.rank, s.step, s.family, s.name,
       CASE WHEN s.phase IS NULL AND s.family = 'execute_model'
            THEN CASE WHEN sa.dec AND NOT sa.pre THEN 'decode' WHEN sa.pre AND NOT sa.dec THEN 'prefill'
                      WHEN sa.dec AND sa.pre THEN 'mixed' END
            ELSE s.phase END AS phase,
       s.batch_size, s.new_tokens, s.context_tokens, s.decode_seqs, s.prefill_seqs, s.prefill_tokens,
       s.prefill_context_tokens, s.prefill_attention_pairs,
       s.host_start_ns, s.host_end_ns, a.device_start_ns, a.device_end_ns,
       a.device_end_ns - a.device_start_ns AS device_span_ns, coalesce(bl.blocked_ns, 0) AS blocked_ns,
       a.device_end_ns - a.device_start_ns - coalesce(bl.blocked_ns, 0) AS step_time_ns, coalesce(a.n_kernels, 0) AS n_kernels,
       coalesce(a.n_rows, 0) AS n_rows, coalesce(a.kernel_time_ns, 0) AS kernel_time_ns,
       a.device_start_ns - s.host_start_ns AS host_lead_ns
FROM st s LEFT JOIN agg a USING (run_id, rank, step) LEFT JOIN blocked bl USING (run_id, rank, step)
LEFT JOIN attn sa USING (run_id, rank, step);
