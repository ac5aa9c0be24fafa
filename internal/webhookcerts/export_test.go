package webhookcerts

// RenewalTime lets the tests move a fake clock to the exact moment a
// certificate falls due.
var RenewalTime = renewalTime
