rule aggregate:
    """Tidy tables from every scored run and sweep (one row per run, one per (run, prompt)): the paper's Tables
    1-3, a speed table and the lambda sweeps' candidates, every interval over prompts."""
    input:
        **PLAN.job("aggregate", {}).inputs,
    output:
        **flagged("aggregate"),
    params:
        **params("aggregate"),
    threads: 1
    log:
        "logs/aggregate.log",
    benchmark:
        "logs/benchmarks/aggregate.tsv",
    conda:
        "../../environment.yml"
    shell:
        "diversed aggregate {params.runs} {params.timing_runs} {params.sweeps} {params.sweep_timing_runs} "
        "{params.lambda_sweeps} {params.judges} --transfer-temperature {params.transfer_temperature} --out {params.out} "
        "> {log} 2>&1"


rule plot:
    """Every figure, from the tables only."""
    input:
        **PLAN.job("plot", {}).inputs,
    output:
        **flagged("plot"),
    params:
        **params("plot"),
    threads: 1
    log:
        "logs/plot.log",
    benchmark:
        "logs/benchmarks/plot.tsv",
    conda:
        "../../environment.yml"
    shell:
        "diversed plot --tables {params.tables} --temperatures {params.temperatures} "
        "--sweep-temperature {params.figure_temperature} --out {params.out} > {log} 2>&1"


rule audit:
    """The timed runs are the scored runs (same tokens, every timed prompt scored, same knob and trained files) and
    every run's counters add up; fails the workflow when a check fails."""
    input:
        **PLAN.job("audit", {}).inputs,
    output:
        **PLAN.outputs("audit"),
    params:
        **params("audit"),
    threads: 1
    log:
        "logs/audit.log",
    benchmark:
        "logs/benchmarks/audit.tsv",
    conda:
        "../../environment.yml"
    shell:
        "diversed audit {params.results} --out {output.audit} > {log} 2>&1"


rule report:
    """results/REPORT.md: the claims per temperature, the heads, the tables, the figures and the provenance."""
    input:
        **PLAN.job("report", {}).inputs,
    output:
        **flagged("report"),
    params:
        **params("report"),
        configs=" ".join(shlex.quote(str(path)) for path in workflow.configfiles),
    threads: 1
    log:
        "logs/report.log",
    benchmark:
        "logs/benchmarks/report.tsv",
    conda:
        "../../environment.yml"
    shell:
        "diversed report --tables {params.tables} --figures {params.figures} --audit {input.audit} "
        "--benchmarks logs/benchmarks --config {params.configs} --claims {output.claims} --out {output.report} "
        "> {log} 2>&1"
