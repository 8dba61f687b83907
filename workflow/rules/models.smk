rule prepare_models:
    """Build a pair's local checkpoints: the embedded SmolLM2 pair (its draft distilled from it, or its first
    layers as the weak draft), or the tiny random smoke pair."""
    output:
        record="resources/models/{pair}.json",
    params:
        kind=pair_value("prepare"),
        draft_layers=pair_value("draft_layers"),
        recipe=draft_recipe,  # the distilled draft's recipe id: a changed recipe rebuilds it
    threads: all_cores
    log:
        "logs/prepare_models/{pair}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed prepare-models --kind {params.kind} --draft-layers {params.draft_layers} --record {output.record} "
        "> {log} 2>&1"
