"""Fine-tuning for the sentiment service: data checks, DDP/AMP training loop, default model.

`python -m training train ...` fine-tunes a local BERT-family encoder on labelled rows;
`python -m training build-default` builds the default English model from PyPI-shipped data.
"""
