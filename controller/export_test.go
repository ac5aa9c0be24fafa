package controller

// ApplyStatus is applyStatus, for the benchmark's bare client, which sends
// the controller's own patch bodies.
var ApplyStatus = applyStatus
