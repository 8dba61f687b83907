rule train_head:
    """The DIVERSED weight head for one task (REINFORCE; resumable from its checkpoint) at the config's lambda; a
    task of lambda_sweep gets its head from sweep_lambda instead."""
    wildcard_constraints:
        task=one_of([t for t in PLAN.tasks if t not in PLAN.lambda_tasks]),
    input:
        unpack(inputs("train_head")),
    output:
        **PLAN.outputs("train_head"),
    params:
        **params("train_head"),
    threads: threads("train_head")
    priority: 3
    resources:
        gpu=gpu("train_head"),
    log:
        "logs/train_head/{pair}/{task}.log",
    benchmark:
        "logs/benchmarks/train_head/{pair}/{task}.tsv",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed train head {params.pair} {params.config} {params.execution} --out {params.out} > {log} 2>&1"


use rule train_head as train_head_lambda with:
    wildcard_constraints:
        task=one_of(PLAN.lambda_tasks),
    input:
        unpack(inputs("train_head_lambda")),
    output:
        **PLAN.outputs("train_head_lambda"),
    params:
        **params("train_head_lambda"),
    threads: threads("train_head_lambda")
    priority: 3
    resources:
        gpu=gpu("train_head_lambda"),
    log:
        "logs/train_head_lambda/{pair}/{task}/lambda{lam}.log",
    benchmark:
        "logs/benchmarks/train_head_lambda/{pair}/{task}/lambda{lam}.tsv",


rule distill_draft:
    """The fine-tuned-draft baseline: the draft fine-tuned on the task's training prompts (distill: toward the
    target's own text; sft: on the reference answers)."""
    input:
        unpack(inputs("distill_draft")),
    output:
        draft=directory(PLAN.outputs("distill_draft")["draft"]),
    params:
        **params("distill_draft"),
    threads: threads("distill_draft")
    priority: 1
    resources:
        gpu=gpu("distill_draft"),
    log:
        "logs/distill_draft/{pair}/{task}.log",
    benchmark:
        "logs/benchmarks/distill_draft/{pair}/{task}.tsv",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed train draft {params.pair} {params.config} {params.execution} --out {output.draft} > {log} 2>&1"


rule mine_judge:
    """AutoJudge's labels for one task: the target's greedy answers to its train prompts, each position where the
    draft would choose another token swapped to it and continued greedily, labelled important where the task's
    verdict changes; the features beside them (resumable: a rerun keeps the finished prompts)."""
    input:
        unpack(inputs("mine_judge")),
    output:
        **PLAN.outputs("mine_judge"),
    params:
        **params("mine_judge"),
    threads: threads("mine_judge")
    priority: 3
    resources:
        gpu=gpu("mine_judge"),
    log:
        "logs/mine_judge/{pair}/{task}.log",
    benchmark:
        "logs/benchmarks/mine_judge/{pair}/{task}.tsv",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed mine-judge {params.pair} {params.config} {params.execution} --out {params.out} > {log} 2>&1"


rule train_judge:
    """AutoJudge's classifier for one task: a logistic regression on the mined mismatches' hidden states (CPU),
    its class balance, held-out AUC and AUC on its transfers' eval tasks (--eval-labels) in its manifest."""
    input:
        unpack(inputs("train_judge")),
    output:
        **PLAN.outputs("train_judge"),
    params:
        **params("train_judge"),
    threads: threads("train_judge")
    priority: 3
    log:
        "logs/train_judge/{pair}/{task}.log",
    benchmark:
        "logs/benchmarks/train_judge/{pair}/{task}.tsv",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} diversed train-judge --labels {params.labels} {params.eval_labels} {params.fit} "
        "--out {params.out} > {log} 2>&1"
