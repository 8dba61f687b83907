rule aggregate:
    """Tidy tables from every scored run and sweep (one row per run, one per (run, prompt)): the paper's Tables
    1-3, a speed table and the lambda sweeps' candidates, every interval over prompts."""
    input:
        scores=[f"{run}/scores.json" for run in runs()],
        timing_scores=[f"{run}/scores.json" for run in timing_runs()],
        sweep_timing_scores=[f"{sweep}/{point}/scores.json" for sweep in timed_sweeps() for point, _ in sweep_points()],
        sweeps=[f"{sweep}/sweep.csv" for sweep in sweeps()],
        lambda_sweeps=lambda_sweeps(),
    output:
        runs="results/tables/runs.csv",
        prompts="results/tables/prompts.csv",
        sweeps="results/tables/sweeps.csv",
        sweep_prompts="results/tables/sweep_prompts.csv",
        weights="results/tables/weights.csv",
        tables=TABLES,
    params:
        runs=lambda wildcards, input: [os.path.dirname(s) for s in input.scores],
        timing_runs=lambda wildcards, input: [os.path.dirname(s) for s in input.timing_scores],
        sweep_timing_runs=lambda wildcards, input: [os.path.dirname(s) for s in input.sweep_timing_scores],
        lambda_sweeps=lambda wildcards, input: f"--lambda-sweeps {' '.join(input.lambda_sweeps)}"
        if input.lambda_sweeps else "",
        transfer_temperature=temperature(config["transfer_temperature"]),
        out=lambda wildcards, output: os.path.dirname(output.runs),
    threads: 1
    log:
        "logs/aggregate.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed aggregate --runs {params.runs} --timing-runs {params.timing_runs} --sweeps {input.sweeps} "
        "--sweep-timing-runs {params.sweep_timing_runs} "
        "{params.lambda_sweeps} "
        "--transfer-temperature {params.transfer_temperature} --out {params.out} > {log} 2>&1"


rule plot:
    """Every figure, from the tables only."""
    input:
        runs=rules.aggregate.output.runs,
        prompts=rules.aggregate.output.prompts,
        sweeps=rules.aggregate.output.sweeps,
        weights=rules.aggregate.output.weights,
    output:
        figures=FIGURES,
    params:
        temperatures=[temperature(T) for T in config["temperatures"]],
        figure_temperature=temperature(SWEEP["figure_temperature"]),
        tables=lambda wildcards, input: os.path.dirname(input.runs),
        out=lambda wildcards, output: os.path.dirname(output.figures[0]),
    threads: 1
    log:
        "logs/plot.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed plot --tables {params.tables} --temperatures {params.temperatures} "
        "--sweep-temperature {params.figure_temperature} --out {params.out} > {log} 2>&1"


rule report:
    """results/REPORT.md: the claims per temperature, the heads, the tables, the figures and the provenance."""
    input:
        runs=rules.aggregate.output.runs,
        prompts=rules.aggregate.output.prompts,
        sweep_prompts=rules.aggregate.output.sweep_prompts,
        tables=rules.aggregate.output.tables,
        figures=rules.plot.output.figures,
    output:
        report="results/REPORT.md",
    params:
        tables=lambda wildcards, input: os.path.dirname(input.runs),
        figures=lambda wildcards, input: os.path.dirname(input.figures[0]),
    threads: 1
    log:
        "logs/report.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed report --tables {params.tables} --figures {params.figures} --out {output.report} > {log} 2>&1"
