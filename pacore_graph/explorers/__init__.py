"""What produces one trajectory: the ``Explorer`` protocol, and its two kinds, one chat completion
(``ChatExplorer``) or one whole agent episode (``AgentExplorer``), each told which trajectory it is by an
``EpisodeContext``. The operator never knows which kind it runs."""
