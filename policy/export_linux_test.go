package policy

// AgentSocketFrom is agentSocket for the external tests.
var AgentSocketFrom = agentSocket
