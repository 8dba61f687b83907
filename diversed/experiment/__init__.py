"""The experiment: a workflow config as typed dataclasses (`config`), each key declared once with its type,
default, range, choices and help, and what is generated from the declarations (`declared`: the schema, the parse
and its messages, the key table; `generated`: the committed files)."""
