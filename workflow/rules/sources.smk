localrules:
    fetch_sources,


rule fetch_sources:
    """Every hub model and hub dataset of the config into the Hugging Face cache, once, on the submitting node
    (compute nodes may have no internet), before any job that loads them; gated models fail here, in one line."""
    output:
        **PLAN.outputs("fetch_sources"),
    params:
        **params("fetch_sources"),
    threads: 1
    log:
        "logs/fetch_sources.log",
    benchmark:
        "logs/benchmarks/fetch_sources.tsv",
    conda:
        "../../environment.yml"
    shell:
        "diversed fetch-sources {params.models} {params.tasks} --record {output.record} > {log} 2>&1"
