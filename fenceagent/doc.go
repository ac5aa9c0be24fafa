// Package fenceagent declares this cluster's identity and epoch to the fence
// authority, tracks the answer, writes it as data.fence for the policies, and
// signals every fence transition.
package fenceagent
