import { forkTests } from './forks'

forkTests('bwrap')
