"""Tool-using agents built on the PaCoRe operator (installed as ``pacore_agents``)."""
