import { gracefulRestartTest } from './graceful-restart'

gracefulRestartTest('harness_2')
