"""A pure-numpy reference inference engine that the falsify contracts are proven on."""
