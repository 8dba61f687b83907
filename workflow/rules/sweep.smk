rule sweep_point:
    """One point of a static sweep: decode + score the task's dev split at a fixed w (w = 1 is strict) and
    mixing; the dev split is disjoint from the eval prompts reported and the train prompts."""
    input:
        unpack(models),
    output:
        manifest=f"{SWEEP_POINT}/manifest.json",
        generations=f"{SWEEP_POINT}/generations.jsonl",
        scores=f"{SWEEP_POINT}/scores.json",
    params:
        target=pair_value("target"),
        draft=pair_value("draft"),
        draft_layers=pair_value("draft_layers"),
        dtype=pair_value("dtype"),
        device=pair_value("device"),
        data=data_files,
        n=task_value("n_dev"),
        max_new=task_value("max_new_tokens"),
        experiment=EXPERIMENT,
        run_dir=lambda wildcards, output: os.path.dirname(output.manifest),
    threads: all_cores
    resources:
        gpu=gpus,
    log:
        "logs/sweep_point/{pair}/{task}/T{T}-K{K}/w{w}-{mixing}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed sweep-point --target {params.target} --draft {params.draft} --draft-layers {params.draft_layers} "
        "--dtype {params.dtype} --device {params.device} --task {wildcards.task} {params.data} --split dev "
        "-n {params.n} --max-new-tokens {params.max_new} --temperature {wildcards.T} -K {wildcards.K} --seed 0 "
        "--weight {wildcards.w} --mixing {wildcards.mixing} --run-dir {params.run_dir} "
        "--label pair={wildcards.pair} --label experiment={params.experiment} > {log} 2>&1"


rule sweep_choose:
    """A sweep's table and the task's fixed w: the largest acceptance within a tolerance of strict quality."""
    input:
        scores=sweep_points,
    output:
        choice=f"{SWEEP_DIR}/choice.json",
        table=f"{SWEEP_DIR}/sweep.csv",
        markdown=f"{SWEEP_DIR}/sweep.md",
    params:
        runs=lambda wildcards, input: [os.path.dirname(s) for s in input.scores],
        tolerance=f"--tolerance {SWEEP['tolerance']}" if SWEEP["tolerance"] is not None else "",
        out=lambda wildcards, output: os.path.dirname(output.choice),
    threads: 1
    log:
        "logs/sweep_choose/{pair}/{task}/T{T}-K{K}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed sweep-choose {params.runs} {params.tolerance} --out {params.out} > {log} 2>&1"
