// Package controller holds the Component reconciler, which writes each
// Component's fence conditions as the policies decide them and re-checks every
// Component when the fence changes.
package controller
