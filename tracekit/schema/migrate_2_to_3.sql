-- Schema 2 → 3: the model a run served (issue 15: model-aware step costing). Frozen: the table as
-- schema 3 created it; later changes are later steps.
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
