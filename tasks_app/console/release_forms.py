"""Forms of the agents page's release actions; they only parse and bound their
input: what may be released, promoted or rolled back is `services.releases`'s."""

from __future__ import annotations

from django import forms

MAX_INT = 2**31 - 1


class ReleaseForm(forms.Form):
    candidate = forms.IntegerField(min_value=1, max_value=MAX_INT)
    percent = forms.IntegerField(
        min_value=0, max_value=100, label="Share of new tasks (%)",
        error_messages={"required": "Give the share of new tasks, 0 to 100."},
    )


class VersionForm(forms.Form):
    """Promote (a version; none: the candidate) or roll back (to a version; none:
    end the release)."""

    version = forms.IntegerField(min_value=1, max_value=MAX_INT, required=False)
