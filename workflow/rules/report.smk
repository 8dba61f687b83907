rule aggregate:
    """Tidy tables from every scored run and sweep: the paper's Tables 1-3 and a speed table."""
    input:
        scores=[f"{run_dir(*r)}/scores.json" for r in decode_runs()],
        sweeps=[f"{d}/sweep.csv" for d in sweep_dirs()],
    output:
        TABLES,
    params:
        runs=lambda wc, input: " ".join(s.rsplit("/", 1)[0] for s in input.scores),
        transfer_temperature=config["transfer_temperature"],
    log:
        "logs/aggregate.log",
    conda:
        "../../environment.yml"
    shell:
        ("diversed aggregate --runs {params.runs} --sweeps {input.sweeps} "
         "--transfer-temperature {params.transfer_temperature} --out results/tables > {log} 2>&1")


rule plot:
    """Every figure, from the tables only."""
    input:
        TABLES,
    output:
        FIGURES,
    params:
        temperatures=" ".join(str(t) for t in config["temperatures"]),
    log:
        "logs/plot.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed plot --tables results/tables --out figures --temperatures {params.temperatures} > {log} 2>&1"


rule report:
    """results/REPORT.md: the tables, the figures and the provenance of this reproduction."""
    input:
        TABLES,
        FIGURES,
    output:
        "results/REPORT.md",
    log:
        "logs/report.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed report --tables results/tables --figures figures --out {output} > {log} 2>&1"
