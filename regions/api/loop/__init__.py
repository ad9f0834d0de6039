"""The control loop's API: heartbeats, drill polls, the routing table and its history,
decisions and completions, operator actions. Imports the API's shared plumbing
(``regions.api``), the features and lower layers; never another ``regions.api`` feature package.
"""
