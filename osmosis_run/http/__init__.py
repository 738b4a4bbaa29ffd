"""HTTP/1.1 for osmosis-run: the one listener that serve and the gateway speak through, and
the one client that eval --server and the gateway's upstream calls use. Nothing here knows
about rollouts."""
