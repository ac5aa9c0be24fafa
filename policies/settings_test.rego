package fencegate.settings_test

import data.fencegate.settings

test_enforcement_defaults_to_deny if {
	settings.enforcement == "deny" with data.fencegate.config as {}
}

test_enforcement_reads_the_config if {
	settings.enforcement == "warn" with data.fencegate.config as {"enforcement": "warn"}
	settings.enforcement == "dryrun" with data.fencegate.config as {"enforcement": "dryrun"}
	settings.enforcement == "deny" with data.fencegate.config as {"enforcement": "deny"}
}

test_unknown_enforcement_counts_as_deny if {
	settings.enforcement == "deny" with data.fencegate.config as {"enforcement": "block"}
	settings.enforcement == "deny" with data.fencegate.config as {"enforcement": true}
}

test_lists_default_to_empty if {
	settings.exempt_users == set() with data.fencegate.config as {}
	settings.exempt_groups == set() with data.fencegate.config as {}
	settings.exempt_namespaces == set() with data.fencegate.config as {}
	settings.controller_users == set() with data.fencegate.config as {}
}

test_lists_read_the_config if {
	config := {
		"exempt_users": ["alice"],
		"exempt_groups": ["break-glass", "sre"],
		"exempt_namespaces": ["kube-system"],
		"controller_users": ["system:serviceaccount:fencegate:fencegate"],
	}
	settings.exempt_users == {"alice"} with data.fencegate.config as config
	settings.exempt_groups == {"break-glass", "sre"} with data.fencegate.config as config
	settings.exempt_namespaces == {"kube-system"} with data.fencegate.config as config
	settings.controller_users == {"system:serviceaccount:fencegate:fencegate"} with data.fencegate.config as config
}
