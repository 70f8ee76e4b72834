#pragma once
// Waiting for SIGTERM / SIGINT in a server's main(): BlockTerminationSignals()
// first thing in main (before any thread starts, so every thread inherits the
// mask and the signal is only ever taken by sigwait), then
// WaitForTerminationSignal() once the server runs.

namespace tandem::base {

void BlockTerminationSignals();
// Blocks until SIGTERM or SIGINT arrives; returns the signal number.
int WaitForTerminationSignal();

}  // namespace tandem::base
