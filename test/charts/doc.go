// Package charts tests the Helm charts in charts/ with the real tools: the
// pinned helm lints and renders both charts for every values file in their
// ci/ folders, the tests check what the rendered objects promise (webhooks
// scoped to Components, least-privilege RBAC, restricted pods, fencegate's
// own API priority level, the schema's refusals), and the real kubectl
// applies the manifests with --dry-run=server to a real API server, whose
// admission (including Pod Security "restricted") must accept them without
// a warning.
package charts
