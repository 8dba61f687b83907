rule prepare_models:
    """Build a pair's local checkpoints (the embedded SmolLM2 pair, or the tiny random smoke pair)."""
    output:
        "resources/models/{pair}.json",
    params:
        kind=lambda wc: PAIRS[wc.pair]["prepare"],
        layers=lambda wc: PAIRS[wc.pair]["draft_layers"],
    log:
        "logs/prepare_models/{pair}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed prepare-models --kind {params.kind} --draft-layers {params.layers} --record {output} > {log} 2>&1"
