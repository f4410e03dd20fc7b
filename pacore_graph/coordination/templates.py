"""RSA's aggregation prompt (the verifier's, a config default, is ``pacore_graph.config.VERIFIER_TEMPLATE``).

It renders like the synthesis template (jinja2, default settings, ``original_prompt`` and ``ref_responses``), so
a run can use it in place of it.
"""

from __future__ import annotations

# Recursive Self-Aggregation's math aggregation prompt, as HyperPotatoNeo/RSA's eval_loop.py
# (aggregate_prompt, task "math") builds it: parts joined by newlines, problem and candidates stripped,
# one wording for a single candidate and another for several (its missing space included).
RSA_TEMPLATE = r"""{% if ref_responses | length == 1 %}You are given a math problem and a candidate solution. The candidate may be incomplete or contain errors. Refine this trajectory and produce an improved, higher-quality solution. If it is entirely wrong, attempt a new strategy. End with the final result in \boxed{}.

Problem:

{{ original_prompt | trim }}

Candidate solution (may contain mistakes):

---- Candidate ----
{{ ref_responses[0] | trim }}

Now refine the candidate into an improved solution. Provide clear reasoning and end with the final answer in \boxed{}.{% else %}You are given a math problem and several candidate solutions. Some candidates may be incorrect or contain errors. Aggregate the useful ideas and produce a single, high-quality solution. Reason carefully; if candidates disagree, choose the correct path. If all are incorrect, then attempt a different strategy.End with the final result in \boxed{}.

Problem:

{{ original_prompt | trim }}

Candidate solutions (may contain mistakes):
{% for response in ref_responses %}
---- Solution {{ loop.index }} ----
{{ response | trim }}
{% endfor %}
Now write a single improved solution. Provide clear reasoning and end with the final answer in \boxed{}.{% endif %}
"""
