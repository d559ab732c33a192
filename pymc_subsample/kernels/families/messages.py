"""The refusal text of ScalableMH's ``bounds='auto'`` and the page it points to.

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations




#: The documentation page that lists the families ``bounds='auto'`` knows, how to pass
#: bounds of one's own and how to register a family; every refusal points to it.
FAMILIES_DOC = "docs/families.md"
#: The upper limit on the length of a refusal (:func:`auto_refusal`) with names of
#: ordinary length: a message read at a prompt, not a manual.
REFUSAL_LIMIT = 300


def auto_refusal(what: str) -> str:
    """A refusal of ScalableMH's ``bounds='auto'``: ``what`` (one sentence naming the
    observed variable and what about its likelihood is not supported), then what to do
    instead and the page that lists the families (:data:`FAMILIES_DOC`). The full list
    (:func:`supported_text`) is left to that page and to :data:`pymc_subsample.engine.
    glm.SUPPORTED_TEXT`, so that the message stays within :data:`REFUSAL_LIMIT`
    characters for names of ordinary length."""
    return (f"ScalableMH bounds='auto': {what} Pass bounds= (a callable or an array) or use "
            f"AustereMH/BarkerMinibatch; see {FAMILIES_DOC}.")
