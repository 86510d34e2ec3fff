// Loaded with `node --require` before dynalite: a client that disconnects mid-request makes
// dynalite 4 rethrow a socket error and exit; log it and keep serving the other clients.
process.on('uncaughtException', (err) => {
  console.error(`dynalite: ignored ${err && err.code ? err.code : ''} ${err && err.message}`)
})
