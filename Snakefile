# The diversed reproduction: static weight sweeps and verifier training per task -> decoding runs -> quality
# scoring -> tables, figures and results/REPORT.md. `snakemake --cores all` runs config/config.yaml (the embedded
# default).
from snakemake.utils import min_version

min_version("9.0")


# `snakemake --report results/report.html` (or .zip): the figures, the main tables and the claims, with captions.
report: "workflow/report/workflow.rst"


# The embedded default, unless --configfile names another (configs are whole, not layered).
if not config:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/sources.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/sweep.smk"
include: "workflow/rules/decode.smk"
include: "workflow/rules/report.smk"


# On a cluster these run on the submitting node: light CPU work on the finished results.
localrules:
    aggregate,
    plot,
    report,


rule all:
    input:
        rules.report.output,
    default_target: True
