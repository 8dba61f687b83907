rule prepare_models:
    """Build a pair's local checkpoints: the embedded SmolLM2 pair (its draft distilled from it, or its first
    layers as the weak draft), or the tiny random smoke pair; recipe: the distilled draft's recipe id (a changed
    recipe rebuilds it)."""
    output:
        **PLAN.outputs("prepare_models"),
    params:
        **params("prepare_models"),
    threads: threads("prepare_models")
    log:
        "logs/prepare_models/{pair}.log",
    benchmark:
        "logs/benchmarks/prepare_models/{pair}.tsv",
    conda:
        "../../environment.yml"
    shell:
        "diversed prepare-models --kind {params.kind} --draft-layers {params.draft_layers} --record {output.record} "
        "> {log} 2>&1"
