package engine

import "time"

// SetClockForModel replaces e's clock (the model-based test runs a virtual
// clock so that windows expire when the model says time has passed).
func SetClockForModel(e *Engine, now func() time.Time) { e.now = now }

// SetTransitionForModel makes e decide with f instead of Transition (the
// model's mutants break one rule of it to show the model finds the
// violation).
func SetTransitionForModel(e *Engine, f func(prev *Claim, ev Event) Ready) { e.transition = f }

// SetHostVMWhoForModel makes FenceHost identify its VMs with f instead of
// HostVM.who until the returned function is called (the model's mutant
// fence-host-no-placement).
func SetHostVMWhoForModel(f func(HostVM, HostFence) Who) (undo func()) {
	old := hostVMWho
	hostVMWho = f
	return func() { hostVMWho = old }
}

// SetUnknownAsNoClaimForModel makes the engine read a claim of unknown
// belonging as no claim, as before issue 31 item 2, until the returned
// function is called (the model's mutant fence-host-no-placement).
func SetUnknownAsNoClaimForModel() (undo func()) {
	unknownAsNoClaim = true
	return func() { unknownAsNoClaim = false }
}

// SetStartedAgainOffForModel turns the rule startedAgain off until the
// returned function is called (the model's mutant ignore-started-refusal:
// its stale domain on the claim's host is refused at prepare by that rule
// as well, so the mutant takes both guards away).
func SetStartedAgainOffForModel() (undo func()) {
	startedAgainOff = true
	return func() { startedAgainOff = false }
}
